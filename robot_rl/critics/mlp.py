"""Single MLP critic: ``V(s)`` (``action_dim = 0``) or ``Q(s, a)``, one output per reward group."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from robot_rl.config.checks import check
from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.registry import register_critic
from robot_rl.models.mlp import ACTIVATIONS, mlp
from robot_rl.models.normalizer import EmpiricalNormalizer


@dataclass
class MLPCriticConfig:
    """``critic=mlp``.

    Attributes:
        hidden_dims: hidden layer sizes.
        activation: elu, relu, tanh, silu or gelu.
        normalize_obs: keep running observation statistics and normalise inputs with them.
    """

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128, 64])
    activation: str = "elu"
    normalize_obs: bool = True

    def __post_init__(self) -> None:
        check(self, "critic", at_least_1=("hidden_dims",), choices={"activation": ACTIVATIONS})


@register_critic("mlp", MLPCriticConfig)
class MLPCritic(Critic):
    """One MLP over ``[obs, action]`` with ``G`` outputs; ``E = 1`` member."""

    def __init__(self, spec: CriticSpec, cfg: MLPCriticConfig) -> None:
        super().__init__(spec)
        in_dim = spec.obs_dim + spec.action_dim
        self.normalizer = EmpiricalNormalizer(spec.obs_dim) if cfg.normalize_obs else None
        self.net = mlp(in_dim, cfg.hidden_dims, spec.num_values, cfg.activation)

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[1, B, G]`` for ``obs`` ``[B, D]`` (and ``action`` ``[B, A]`` for Q)."""
        x = self.normalizer(obs) if self.normalizer is not None else obs
        if action is not None:
            x = torch.cat([x, action], dim=-1)
        return self.net(x).unsqueeze(0)

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` ``[B, D]`` into the input statistics (no-op when not normalising)."""
        if self.normalizer is not None:
            self.normalizer.update(obs)
