"""Q ensembles with LayerNorm after every hidden layer (``critic=ensemble_ln``), as RLPD uses.

Ball et al., "Efficient Online Reinforcement Learning with Offline Data" (RLPD, ICML 2023) found
LayerNorm in the critic essential when offline (demo) data is in the replay: it bounds the Q values
the critic can extrapolate to actions outside the data, which otherwise diverge. Same stacked-parameter
ensemble as ``critic=ensemble``; each member's LayerNorm has its own affine parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.critics.base import CriticSpec
from robot_rl.critics.ensemble import EnsembleCritic, EnsembleCriticConfig, StackedMLP, input_dim
from robot_rl.critics.registry import register_critic


class StackedLayerNormMLP(StackedMLP):
    """``E`` MLPs ``[B, in] -> [E, B, out]``: Linear, LayerNorm, activation per hidden layer."""

    def __init__(self, num_members: int, in_dim: int, hidden_dims: list[int], out_dim: int,
                 activation: str = "relu") -> None:
        super().__init__(num_members, in_dim, hidden_dims, out_dim, activation)
        self.norm_weights = nn.ParameterList([nn.Parameter(torch.ones(num_members, 1, h)) for h in hidden_dims])
        self.norm_biases = nn.ParameterList([nn.Parameter(torch.zeros(num_members, 1, h)) for h in hidden_dims])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """All members on the same input: ``x [B, in]`` -> ``[E, B, out]``."""
        h = x.unsqueeze(0).expand(self.num_members, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = F.layer_norm(h, h.shape[-1:]) * self.norm_weights[i] + self.norm_biases[i]
                h = self.act(h)
        return h


@dataclass
class LayerNormEnsembleCriticConfig(EnsembleCriticConfig):
    """``critic=ensemble_ln``: the ``ensemble`` settings (members, subset, widths, activation)."""


@register_critic("ensemble_ln", LayerNormEnsembleCriticConfig)
class LayerNormEnsembleCritic(EnsembleCritic):
    """``E`` LayerNorm Q networks in one batched call; estimates ``[E, B, G]``."""

    def __init__(self, spec: CriticSpec, cfg: LayerNormEnsembleCriticConfig) -> None:
        super().__init__(spec, cfg)
        self.members = StackedLayerNormMLP(
            cfg.num_members, input_dim(spec), list(cfg.hidden_dims), spec.num_values, cfg.activation
        )
