"""Gaussian MLP actor: normalised observation -> mean action, with a learned state-independent std."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from robot_rl.models.mlp import mlp
from robot_rl.models.normalizer import EmpiricalNormalizer

STD_TYPES = ("scalar", "log")
STD_MIN = 1e-6
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class GaussianActor(nn.Module):
    """``pi(a | o) = N(mu(norm(o)), diag(std^2))``; the std is a free parameter per action.

    ``std_type="scalar"`` learns the std itself (rsl_rl's default, clamped to >= 1e-6): Adam then
    moves it by about the learning rate per step whatever its size. ``"log"`` learns ``log std``:
    each step changes the std by about the learning rate *relative* to its value, so a small std
    shrinks (and grows) more slowly.

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
        std_type: str = "scalar",
    ) -> None:
        super().__init__()
        if init_std <= 0:
            raise ValueError(f"init_std must be > 0, got {init_std}")
        if std_type not in STD_TYPES:
            raise ValueError(f"std_type={std_type!r} is not one of {STD_TYPES}")
        self.std_type = std_type
        self.normalizer = EmpiricalNormalizer(obs_dim) if normalize else nn.Identity()
        self.net = mlp(obs_dim, hidden_dims, action_dim, act)
        init = torch.full((action_dim,), float(init_std))
        self.std_param = nn.Parameter(init if std_type == "scalar" else init.log())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean) ``[B, A]`` for raw ``obs`` ``[B, D]``."""
        return self.net(self.normalizer(obs))

    def std(self) -> torch.Tensor:
        """The action standard deviation ``[A]``."""
        if self.std_type == "scalar":
            return self.std_param.clamp_min(STD_MIN)
        return self.std_param.exp()

    def mean_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean [B, A], std [A])`` for raw ``obs`` ``[B, D]``."""
        return self.forward(obs), self.std()

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action [B, A], mean [B, A], std [A])`` with ``action ~ N(mean, std^2)``."""
        mean, std = self.mean_std(obs)
        return mean + std * torch.randn_like(mean), mean, std

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` ``[B, D]`` into the observation statistics (no-op when not normalising)."""
        if isinstance(self.normalizer, EmpiricalNormalizer):
            self.normalizer.update(obs)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``log N(actions; mean, std^2)`` summed over the last dim: ``[B, A]`` (std ``[A]`` or ``[B, A]``) -> ``[B]``."""
    z = (actions - mean) / std
    return -(0.5 * z.square() + std.log() + _HALF_LOG_2PI).sum(-1)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Entropy of ``N(., diag(std^2))`` summed over the last dim: std ``[A]`` -> scalar, ``[B, A]`` -> ``[B]``."""
    return (std.log() + 0.5 + _HALF_LOG_2PI).sum(-1)
