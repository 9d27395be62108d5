"""Gaussian MLP actor: normalised observation -> mean action, with a learned state-independent std."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.distributions import Normal

from robot_rl.models.mlp import mlp
from robot_rl.models.normalizer import EmpiricalNormalizer


class GaussianActor(nn.Module):
    """``pi(a | o) = N(mu(norm(o)), diag(std^2))``; the std is a free parameter per action.

    Shapes: ``obs`` ``[B, D]`` raw observations, actions ``[B, A]``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (256, 128, 64),
        act: str = "elu",
        init_std: float = 1.0,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if init_std <= 0:
            raise ValueError(f"init_std must be > 0, got {init_std}")
        self.normalizer = EmpiricalNormalizer(obs_dim) if normalize else nn.Identity()
        self.net = mlp(obs_dim, hidden_dims, action_dim, act)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_std)).log())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean) ``[B, A]`` for raw ``obs`` ``[B, D]``."""
        return self.net(self.normalizer(obs))

    def distribution(self, obs: torch.Tensor) -> Normal:
        """The action distribution for raw ``obs`` ``[B, D]`` (batch shape ``[B, A]``)."""
        mean = self.forward(obs)
        return Normal(mean, self.log_std.exp().expand_as(mean))

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` ``[B, D]`` into the observation statistics (no-op when not normalising)."""
        if isinstance(self.normalizer, EmpiricalNormalizer):
            self.normalizer.update(obs)
