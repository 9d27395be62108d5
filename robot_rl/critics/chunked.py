"""Chunked Q critics: the value of an action *sequence*, and its decoupled partial-chunk variant.

``critic=chunked`` — ``Q(s_t, a_{t:t+h})`` as an ensemble of MLPs over the observation and the
flattened chunk ``[B, h, A]`` (Q-chunking: Li, Zhou & Levine, "Reinforcement Learning with Action
Chunking", 2025; CQN-AS: Seo et al., "Reinforcement Learning with Action Sequence for Data-Efficient
Robot Learning", 2024). It is trained towards the chunk target of
:func:`robot_rl.math.chunk_targets.chunk_return`: ``h`` rewards summed, then one bootstrap ``gamma^h``
ahead, so value propagates ``h`` steps per backup without n-step returns' off-policy bias.

With ``partial_len = l`` (``0 < l < h``) it is DQC (Li et al., "Decoupled Q-Chunking", ICLR 2026):
a second ensemble ``Q_P(s, a_{t:t+l})`` scores only the first ``l`` actions and is distilled from
the long-chunk critic *optimistically*, ``Q_P(s, a_{:l}) ~ max_{a_{l:h}} Q(s, a_{:h})``, by expectile
regression with ``expectile > 0.5`` on chunks from the data. The policy then acts on short chunks
(closed loop every ``l`` steps) while values still back up over ``h`` steps.

The critic declares what an agent needs (:attr:`~robot_rl.critics.base.Critic.chunk_len` ``h``,
:attr:`ChunkedCritic.actor_len` ``l`` or ``h``, :attr:`~robot_rl.critics.base.Critic.on_truncation`); the agent sizes
its chunked actor (:mod:`robot_rl.models.chunked_actor`) and its replay chunks from the critic object.

Shapes: ``B`` batch, ``E`` members, ``G`` values, ``h`` critic chunk, ``l`` partial chunk, ``A`` actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.ensemble import StackedMLP
from robot_rl.critics.layer_norm import StackedLayerNormMLP
from robot_rl.critics.registry import register_critic


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared loss ``|tau - 1(diff < 0)| * diff^2`` averaged; ``diff = target - prediction``.

    ``expectile = 0.5`` is half the mean squared error; ``-> 1`` approaches the maximum of the targets
    (IQL, Kostrikov et al. 2022), the optimistic backup DQC distils with.
    """
    if not 0.0 < expectile < 1.0:
        raise ValueError(f"expectile must be in (0, 1), got {expectile}")
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


@dataclass
class ChunkedCriticConfig:
    """``critic=chunked``: Q over action chunks (Q-chunking), optionally with DQC's partial critic.

    Attributes:
        chunk_len: ``h``, actions the critic scores (the agent's chunked actor follows it).
        partial_len: ``l``; ``0`` = plain Q-chunking, ``0 < l < h`` = DQC partial-chunk critic.
        expectile: DQC's distillation expectile in ``(0.5, 1)`` (optimism towards the best completion).
        num_members: ``E`` (2 = clipped double Q).
        hidden_dims, activation: member MLP shape.
        on_truncation: ``bootstrap`` or ``mask`` chunks cut by a time limit (see ``chunk_return``).
        layer_norm: LayerNorm after every hidden layer (as RLPD's ``ensemble_ln`` and Q-chunking's critics; bounds
            the values extrapolated to actions outside demo data).
    """

    chunk_len: int = 5
    partial_len: int = 0
    expectile: float = 0.9
    num_members: int = 2
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    on_truncation: str = "bootstrap"
    layer_norm: bool = False

    def __post_init__(self) -> None:
        if self.chunk_len < 1:
            raise ValueError(f"critic.chunk_len must be >= 1, got {self.chunk_len}")
        if not 0 <= self.partial_len < self.chunk_len:
            raise ValueError(
                f"critic.partial_len must be 0 (off) or in [1, chunk_len={self.chunk_len}), got {self.partial_len}"
            )
        if self.partial_len and not 0.5 <= self.expectile < 1.0:
            raise ValueError(f"critic.expectile must be in [0.5, 1) for DQC distillation, got {self.expectile}")
        if self.on_truncation not in ("bootstrap", "mask"):
            raise ValueError(f"critic.on_truncation must be 'bootstrap' or 'mask', got {self.on_truncation!r}")


@register_critic("chunked", ChunkedCriticConfig)
class ChunkedCritic(Critic):
    """Ensemble ``Q(s, a_{t:t+h})`` ``[E, B, G]`` (+ DQC's ``Q_P(s, a_{t:t+l})`` when ``partial_len > 0``)."""

    kinds = frozenset({"Q"})

    def __init__(self, spec: CriticSpec, cfg: ChunkedCriticConfig) -> None:
        super().__init__(spec)
        self.cfg = cfg
        self.chunk_len = cfg.chunk_len
        self.on_truncation = cfg.on_truncation
        self.partial_len = cfg.partial_len
        """``l``, actions DQC's partial critic scores (0 = no partial critic)."""
        self.subset = min(2, cfg.num_members)
        dims = list(cfg.hidden_dims)
        A, D, G = spec.action_dim, spec.obs_dim, spec.num_values
        net = StackedLayerNormMLP if cfg.layer_norm else StackedMLP
        self.members = net(cfg.num_members, D + cfg.chunk_len * A, dims, G, cfg.activation)
        self.partial = (
            net(cfg.num_members, D + cfg.partial_len * A, dims, G, cfg.activation) if cfg.partial_len else None
        )

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[E, B, G]`` values of executing the chunk ``action`` ``[B, h, A]`` open loop from ``obs`` ``[B, D]``."""
        chunk = self.check_action(action)
        return self.members(torch.cat([obs, chunk.flatten(1)], dim=-1))

    @property
    def actor_len(self) -> int:
        """Actions per chunk an actor trained against this critic outputs: DQC's ``l``, else ``h``."""
        return self.partial_len or self.chunk_len

    def actor_estimates(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """``[E, B, G]`` value an actor maximises, of its chunk ``[B, actor_len, A]`` at ``obs`` ``[B, D]``: DQC's
        partial critic ``Q_P`` when ``l < h``, else ``Q``."""
        return self.partial_estimates(obs, chunk) if self.partial is not None else self.estimates(obs, chunk)

    def partial_estimates(self, obs: torch.Tensor, partial: torch.Tensor) -> torch.Tensor:
        """DQC: ``[E, B, G]`` optimistic value of the first ``l`` actions ``partial`` ``[B, l, A]``."""
        if self.partial is None:
            raise ValueError("partial_estimates needs critic.partial_len > 0 (the DQC variant)")
        expected = (self.partial_len, self.spec.action_dim)
        if partial.dim() != 3 or tuple(partial.shape[1:]) != expected:
            raise ValueError(f"partial chunk must be [B, {expected[0]}, {expected[1]}], got {list(partial.shape)}")
        return self.partial(torch.cat([obs, partial.flatten(1)], dim=-1))

    def distill_loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Expectile regression of ``Q_P(s, a_{:l})`` towards the (detached) long critic's ``Q(s, a_{:h})``.

        Args:
            obs: ``[B, D]``; chunk: ``[B, h, A]`` data chunks (their prefixes are the partial chunks).
        """
        with torch.no_grad():
            long_value = self.estimates(obs, chunk).mean(0)  # [B, G]
        partial = self.partial_estimates(obs, chunk[:, : self.partial_len])
        loss = expectile_loss(long_value.unsqueeze(0) - partial, self.cfg.expectile)
        return loss, {"distill_loss": loss.detach(), "partial_value_mean": partial.detach().mean()}

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor | None, target: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """TD regression of every member towards chunk targets ``[B, G]`` (+ DQC distillation)."""
        loss, metrics = super().loss(obs, action, target)
        if self.partial is not None:
            distill, extra = self.distill_loss(obs, self.check_action(action))
            loss = loss + distill
            metrics.update(extra)
        return loss, metrics
