"""Discrete regression in symlog space (TD-MPC2's reward and value heads; DreamerV3's two-hot).

A scalar ``x`` is regressed as a distribution over ``K`` fixed bins spaced evenly on ``[vmin, vmax]``
in *symlog* space: the target is :func:`two_hot` of ``symlog(x)`` (the two bins around it share the
mass by linear interpolation), the loss is the cross-entropy of the predicted logits against it
(:func:`two_hot_cross_entropy`), and the prediction is read out as ``symexp(sum_k p_k b_k)``
(:func:`two_hot_inv`). TD-MPC2 uses ``K = 101`` bins on ``[-10, 10]`` (Hansen, Su & Wang, ICLR 2024),
which covers ``|x|`` up to ``e^10 - 1 ~ 22026``. The loss does not grow with the scale of ``x``,
which is why one set of hyperparameters works across reward scales.

Pure functions on tensors; ``...`` any leading shape, ``K`` the number of bins.
"""

from __future__ import annotations

import torch


def symlog(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) * log(1 + |x|)``, elementwise (any shape)."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) * (exp(|x|) - 1)``, the inverse of :func:`symlog`, elementwise (any shape)."""
    return torch.sign(x) * torch.expm1(x.abs())


def check_bins(num_bins: int, vmin: float, vmax: float, prefix: str = "") -> None:
    """Refuse fewer than 2 bins or an empty range (``prefix`` names the config keys in the message)."""
    if num_bins < 2:
        raise ValueError(f"{prefix}num_bins must be >= 2 for two-hot regression, got {num_bins} "
                         "(TD-MPC2 uses 101)")
    if not vmin < vmax:
        raise ValueError(f"{prefix}vmin must be < {prefix}vmax (a range in symlog space, TD-MPC2: -10, 10), "
                         f"got vmin={vmin}, vmax={vmax}")


def bins(num_bins: int, vmin: float, vmax: float, device: torch.device | str | None = None) -> torch.Tensor:
    """``[K]`` bin centres ``linspace(vmin, vmax, K)`` in symlog space."""
    check_bins(num_bins, vmin, vmax)
    return torch.linspace(vmin, vmax, num_bins, device=device)


def two_hot(x: torch.Tensor, num_bins: int, vmin: float, vmax: float) -> torch.Tensor:
    """Two-hot encoding ``[..., K]`` of ``symlog(x)`` for scalars ``x`` ``[...]``.

    ``y = clamp(symlog(x), vmin, vmax)`` falls between bins ``i`` and ``i + 1``; bin ``i`` gets
    ``1 - f`` and bin ``i + 1`` gets ``f``, with ``f = (y - b_i) / (b_{i+1} - b_i)``, so the encoding's
    mean over the bins is exactly ``y``. A value on a bin puts all its mass there; values beyond the
    range put all of it on the end bin.
    """
    check_bins(num_bins, vmin, vmax)
    step = (vmax - vmin) / (num_bins - 1)
    pos = (symlog(x).clamp(vmin, vmax) - vmin) / step  # [...] in [0, K - 1]
    low = pos.floor().clamp(max=num_bins - 2)
    frac = (pos - low).unsqueeze(-1)
    idx = low.long().unsqueeze(-1)
    out = torch.zeros(*x.shape, num_bins, device=x.device, dtype=x.dtype)
    out.scatter_(-1, idx, 1.0 - frac)
    return out.scatter_(-1, idx + 1, frac)


def two_hot_inv(logits: torch.Tensor, vmin: float, vmax: float) -> torch.Tensor:
    """Scalar read-out ``[...]`` of ``logits`` ``[..., K]``: ``symexp(sum_k softmax(logits)_k b_k)``."""
    centres = bins(logits.shape[-1], vmin, vmax, logits.device).to(logits.dtype)
    return symexp((logits.softmax(-1) * centres).sum(-1))


def two_hot_cross_entropy(logits: torch.Tensor, target: torch.Tensor, vmin: float, vmax: float) -> torch.Tensor:
    """Cross-entropy ``[...]`` of ``logits`` ``[..., K]`` against :func:`two_hot` of scalar targets ``[...]``
    (no gradient through the target)."""
    soft = two_hot(target.detach(), logits.shape[-1], vmin, vmax)
    return -(soft * logits.log_softmax(-1)).sum(-1)
