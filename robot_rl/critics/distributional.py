"""Distributional Q ensembles: categorical C51 atoms and quantiles (for TQC).

- ``critic=c51``: each member outputs logits over ``K`` fixed atoms from ``v_min`` to ``v_max``
  (Bellemare et al. 2017). The loss is the cross-entropy to a target distribution already
  projected on the support (:meth:`C51Critic.project`, :func:`categorical_projection`). FastTD3
  (Seo et al. 2025) uses two such critics with the clipped-double choice of target.
- ``critic=quantile``: each member outputs ``M`` quantiles at midpoints ``tau_i = (2i+1)/(2M)``
  (Dabney et al. 2018, QR-DQN); trained with the quantile Huber loss, used with truncation by TQC
  (Kuznetsov et al. 2020).

:meth:`estimates` returns the expected values ``[E, B, G]`` like every critic, so agents that only
need ``Q`` treat these as ordinary ensembles; :meth:`distribution` returns ``[E, B, G, K]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from robot_rl.config.checks import check, fail
from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.ensemble import StackedMLP, critic_input, input_dim
from robot_rl.critics.registry import register_critic
from robot_rl.math.td_targets import categorical_projection
from robot_rl.models.mlp import ACTIVATIONS


def quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """Quantile regression Huber loss of predicted quantiles towards target atoms.

    Args:
        quantiles: ``[..., M]`` predicted quantiles at ``tau_i = (2i+1)/(2M)``.
        target: ``[..., K]`` target atoms (no gradient), same leading shape.
        kappa: Huber threshold.

    Returns:
        Scalar mean over all leading dims, quantiles and target atoms.
    """
    num_quantiles = quantiles.shape[-1]
    taus = (torch.arange(num_quantiles, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / num_quantiles
    delta = target.unsqueeze(-2) - quantiles.unsqueeze(-1)  # [..., M, K]
    abs_delta = delta.abs()
    huber = torch.where(abs_delta <= kappa, 0.5 * delta.pow(2), kappa * (abs_delta - 0.5 * kappa))
    weight = (taus.unsqueeze(-1) - (delta.detach() < 0).to(quantiles.dtype)).abs()
    return (weight * huber / kappa).mean()


@dataclass
class C51CriticConfig:
    """Categorical (C51) Q ensemble.

    Attributes:
        num_members: ``E`` (2 = clipped double, as in FastTD3).
        num_atoms: ``K`` atoms of the fixed support.
        v_min, v_max: ends of the support; must cover the task's discounted returns.
        hidden_dims, activation: member MLP shape.
    """

    num_members: int = 2
    num_atoms: int = 101
    v_min: float = -250.0
    v_max: float = 250.0
    hidden_dims: list[int] = field(default_factory=lambda: [512, 256, 128])
    activation: str = "relu"

    def __post_init__(self) -> None:
        check(self, "critic", at_least_1=("num_members", "hidden_dims"), choices={"activation": ACTIVATIONS})
        if self.num_atoms < 2 or not self.v_min < self.v_max:
            name = "num_atoms" if self.num_atoms < 2 else "v_max"
            raise fail(self, "critic", name, "needs num_atoms >= 2 and v_min < v_max",
                       "num_atoms >= 2 and v_max > v_min")


@register_critic("c51", C51CriticConfig)
class C51Critic(Critic):
    """Ensemble of categorical critics; distribution = logits ``[E, B, G, K]``."""

    kinds = frozenset({"Q"})
    target_shape = ("B", "G", "K")

    def __init__(self, spec: CriticSpec, cfg: C51CriticConfig) -> None:
        super().__init__(spec)
        if cfg.num_atoms < 2 or not cfg.v_min < cfg.v_max:
            raise ValueError(
                f"c51 needs num_atoms >= 2 and v_min < v_max, got {cfg.num_atoms}, [{cfg.v_min}, {cfg.v_max}]"
            )
        self.num_atoms = cfg.num_atoms
        self.register_buffer("support", torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms))
        self.members = StackedMLP(
            cfg.num_members, input_dim(spec), list(cfg.hidden_dims), spec.num_values * cfg.num_atoms,
            cfg.activation,
        )

    def distribution(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[E, B, G, K]`` over :attr:`support`."""
        out = self.members(critic_input(obs, self.check_action(action)))
        return out.reshape(*out.shape[:2], self.spec.num_values, self.num_atoms)

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Expected values ``[E, B, G]`` of the categorical distributions."""
        return (self.distribution(obs, action).softmax(-1) * self.support).sum(-1)

    def project(
        self, next_probs: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor
    ) -> torch.Tensor:
        """Target probabilities ``[B, G, K]`` of ``returns + discount * Z`` on the support.

        Args:
            next_probs: ``[B, G, K]`` bootstrap distribution probabilities.
            returns: ``[B, G]`` (n-step) rewards per group.
            discount: ``[B]`` bootstrap discount (0 on termination).
        """
        B, G, K = next_probs.shape
        projected = categorical_projection(
            next_probs.reshape(B * G, K), returns.reshape(B * G),
            discount[:, None].expand(B, G).reshape(B * G), self.support,
        )
        return projected.reshape(B, G, K)

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor | None, target: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-entropy of every member's logits to target probabilities ``[B, G, K]``."""
        logits = self.distribution(obs, action)
        loss = -(target.unsqueeze(0) * logits.log_softmax(-1)).sum(-1).mean()
        q = (logits.detach().softmax(-1) * self.support).sum(-1)
        return loss, {"critic_loss": loss.detach(), "value_mean": q.detach().mean()}


@dataclass
class QuantileCriticConfig:
    """Quantile Q ensemble (TQC's critics).

    Attributes:
        num_members: ``C`` critics (TQC default 5).
        num_quantiles: ``M`` quantiles per critic (TQC default 25).
        kappa: Huber threshold of the quantile loss.
        hidden_dims, activation: member MLP shape (TQC: 3 x 512).
    """

    num_members: int = 5
    num_quantiles: int = 25
    kappa: float = 1.0
    hidden_dims: list[int] = field(default_factory=lambda: [512, 512, 512])
    activation: str = "relu"

    def __post_init__(self) -> None:
        check(self, "critic", at_least_1=("num_members", "num_quantiles", "hidden_dims"), positive=("kappa",),
              choices={"activation": ACTIVATIONS})


@register_critic("quantile", QuantileCriticConfig)
class QuantileCritic(Critic):
    """Ensemble of quantile critics; distribution = quantiles ``[E, B, G, M]``."""

    kinds = frozenset({"Q"})
    target_shape = ("B", "G", "K")

    def __init__(self, spec: CriticSpec, cfg: QuantileCriticConfig) -> None:
        super().__init__(spec)
        if cfg.num_quantiles < 1 or cfg.kappa <= 0:
            raise ValueError(
                f"quantile needs num_quantiles >= 1 and kappa > 0, got {cfg.num_quantiles}, {cfg.kappa}"
            )
        self.num_quantiles = cfg.num_quantiles
        self.kappa = cfg.kappa
        self.members = StackedMLP(
            cfg.num_members, input_dim(spec), list(cfg.hidden_dims), spec.num_values * cfg.num_quantiles,
            cfg.activation,
        )

    def distribution(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Quantiles ``[E, B, G, M]``."""
        out = self.members(critic_input(obs, self.check_action(action)))
        return out.reshape(*out.shape[:2], self.spec.num_values, self.num_quantiles)

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Expected values ``[E, B, G]`` (mean of the quantiles)."""
        return self.distribution(obs, action).mean(-1)

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor | None, target: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Quantile Huber loss of every member towards target atoms ``[B, G, K]``."""
        quantiles = self.distribution(obs, action)  # [E, B, G, M]
        target = target.unsqueeze(0).expand(quantiles.shape[0], -1, -1, -1)
        loss = quantile_huber_loss(quantiles, target, self.kappa)
        return loss, {"critic_loss": loss.detach(), "value_mean": quantiles.detach().mean()}
