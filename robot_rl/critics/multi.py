"""Multi-critic: one independent value (or Q) network per reward group.

``critic=multi`` builds ``G = spec.num_values`` separate MLPs, one per column of the task's
``reward_by_group`` (DESIGN.md contract 1), evaluated together as stacked parameters. Each group's
value is learnt on its own reward only, so a dense tracking term cannot drown a sparse task
term in one shared regression target. The policy update then uses advantages computed per group,
normalised per group and summed with weights
(:func:`robot_rl.math.advantages.normalize_per_group`, used by PPO): every group counts by
its weight, not by the scale of its rewards. This follows the multi-critic of DHAL (Liu, Teng,
Liu, Zhang & Ghaffari, "Discrete-Time Hybrid Automata Learning: Legged Locomotion Meets
Skateboarding", arXiv:2503.01842, 2025) and the G1 dual-critic comparison (Yardimci, "Critic
Architecture Matters: Dual vs. Unified Critics for Humanoid Loco-Manipulation", arXiv:2606.11891,
2026: separate locomotion and manipulation critics reach targets faster than one unified critic).

The *unified vs per-group* switch is the agent's: with ``agent.per_group_values=true`` PPO gives
this critic ``G`` reward groups and normalises advantages per group; with ``false`` the same critic
is a single value of the summed reward (``G = 1``), the unified baseline. ``shared_trunk=true``
replaces the independent networks by one trunk with ``G`` linear heads (cheaper, less separated).

Shapes: ``B`` batch, ``D`` obs, ``G`` groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from robot_rl.config.checks import check
from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.ensemble import StackedMLP, critic_input, input_dim
from robot_rl.critics.registry import register_critic
from robot_rl.models.mlp import ACTIVATIONS, mlp
from robot_rl.models.normalizer import EmpiricalNormalizer


@dataclass
class MultiCriticConfig:
    """``critic=multi``: one network per reward group.

    Attributes:
        hidden_dims: hidden sizes of every group's network (or the shared trunk).
        activation: elu, relu, tanh, silu or gelu.
        normalize_obs: running observation normalisation (shared by the groups).
        shared_trunk: one trunk with ``G`` heads instead of ``G`` independent networks.
    """

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128, 64])
    activation: str = "elu"
    normalize_obs: bool = True
    shared_trunk: bool = False

    def __post_init__(self) -> None:
        check(self, "critic", at_least_1=("hidden_dims",), choices={"activation": ACTIVATIONS})


@register_critic("multi", MultiCriticConfig)
class MultiCritic(Critic):
    """``G`` value (or Q) networks; estimates ``[1, B, G]`` (column ``g`` from network ``g``)."""

    def __init__(self, spec: CriticSpec, cfg: MultiCriticConfig) -> None:
        super().__init__(spec)
        self.normalizer = EmpiricalNormalizer(spec.obs_dim) if cfg.normalize_obs else None
        in_dim, G = input_dim(spec), spec.num_values
        if cfg.shared_trunk:
            self.heads = mlp(in_dim, list(cfg.hidden_dims), G, cfg.activation)
        else:
            self.heads = StackedMLP(G, in_dim, list(cfg.hidden_dims), 1, cfg.activation)
        self.shared_trunk = cfg.shared_trunk

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[1, B, G]`` for ``obs`` ``[B, D]`` (and ``action`` ``[B, A]`` / ``[B, H, A]`` for Q)."""
        x = self.normalizer(obs) if self.normalizer is not None else obs
        x = critic_input(x, self.check_action(action))
        if self.shared_trunk:
            return self.heads(x).unsqueeze(0)
        return self.heads(x).squeeze(-1).T.unsqueeze(0)  # [G, B, 1] -> [1, B, G]

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` ``[B, D]`` into the input statistics (no-op when not normalising)."""
        if self.normalizer is not None:
            self.normalizer.update(obs)
