"""Empirical observation normalisation (running mean / variance, as rsl_rl's EmpiricalNormalization)."""

from __future__ import annotations

import torch
from torch import nn

from robot_rl import distributed


class EmpiricalNormalizer(nn.Module):
    """``y = (x - mean) / (std + eps)`` with ``mean``/``var`` tracked over every sample seen.

    Statistics are buffers, so they are saved with the module and exported inside the policy.
    ``update`` uses the parallel (Chan et al.) merge of batch moments, exact for any batch sizes; under
    data-parallel training the batch is the union of every rank's (:func:`robot_rl.distributed.pooled_moments`),
    so the statistics stay identical across ranks (every rank must call ``update`` together).
    """

    def __init__(self, dim: int, eps: float = 1e-2, until: int | None = None) -> None:
        """Args: dim: feature size ``D``; eps: added to std; until: stop updating after this many samples."""
        super().__init__()
        self.eps = eps
        self.until = until
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` ``[B, D]``."""
        return (x - self.mean) / (self.var.sqrt() + self.eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``[B, D]`` (under data parallelism: all ranks' batches) into the running statistics."""
        if self.until is not None and int(self.count) >= self.until:
            return
        n, batch_mean, batch_var = distributed.pooled_moments(x)
        if n == 0:
            return
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * (self.count * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
