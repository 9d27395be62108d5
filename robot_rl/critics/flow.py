"""Flow-matching critic: the value is read out by integrating a learned velocity field (floq).

``critic=flow`` follows floq (Agrawalla, Nauman, Agrawal & Kumar, "floq: Training Critics via
Flow-Matching for Scaling Compute in Value-Based RL", 2025). Instead of regressing ``Q(s, a)`` in one
forward pass, each member learns a velocity field ``v(z, t | s, a)`` over a scalar value variable
``z`` and flow time ``t in [0, 1]``; the estimate is ``z(1)``, integrated with ``K`` Euler steps from
the centre of the initial interval. Training is conditional flow matching towards the TD target
``y``: ``z_0 ~ U[-w, w]``, ``t ~ U[0, 1]``, ``z_t = (1 - t) z_0 + t y``, loss ``||v(z_t, t) - (y - z_0)||^2``.
More integration steps spend more compute per value (floq's knob for high update-to-data ratios)
without more parameters.

Works as a V or Q critic with ``E`` members (``E = 2`` for clipped double Q in SAC/TD3). Every
agent that uses :meth:`Critic.loss` and :meth:`Critic.forward` (SAC, TD3, PPO) can use it unchanged.

Shapes: ``B`` batch, ``E`` members, ``G`` values, ``F`` time features.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.ensemble import critic_input, input_dim
from robot_rl.critics.registry import register_critic
from robot_rl.models.mlp import mlp


def euler_integrate(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], z0: torch.Tensor, num_steps: int
) -> torch.Tensor:
    """``z(1)`` of ``dz/dt = velocity(z, t)`` from ``z(0) = z0`` with ``num_steps`` Euler steps.

    ``velocity(z [..], t [..]) -> [..]``; ``t`` is broadcast to ``z``'s shape.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    z, dt = z0, 1.0 / num_steps
    for k in range(num_steps):
        z = z + dt * velocity(z, torch.full_like(z, k * dt))
    return z


def time_features(t: torch.Tensor, num_frequencies: int) -> torch.Tensor:
    """``[..., 1]`` flow times -> ``[..., 1 + 2F]``: ``t`` and ``sin/cos(2^k pi t)``, ``k < F``."""
    freqs = (2.0 ** torch.arange(num_frequencies, device=t.device, dtype=t.dtype)) * math.pi
    angles = t * freqs
    return torch.cat([t, angles.sin(), angles.cos()], dim=-1)


@dataclass
class FlowCriticConfig:
    """``critic=flow`` (floq).

    Attributes:
        num_members: ``E`` velocity fields (2 = clipped double Q).
        num_steps: ``K`` Euler steps of the value read-out (compute per estimate).
        init_width: ``w``, the initial value ``z_0`` is drawn from ``U[-w, w]`` in training.
        time_frequencies: Fourier features of the flow time.
        hidden_dims, activation: velocity MLP shape.
    """

    num_members: int = 2
    num_steps: int = 8
    init_width: float = 1.0
    time_frequencies: int = 4
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"

    def __post_init__(self) -> None:
        for name in ("num_members", "num_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"critic.{name} must be >= 1, got {getattr(self, name)}")
        if self.init_width < 0 or self.time_frequencies < 0:
            raise ValueError(
                f"critic.init_width and critic.time_frequencies must be >= 0, got {self.init_width}, "
                f"{self.time_frequencies}"
            )


@register_critic("flow", FlowCriticConfig)
class FlowCritic(Critic):
    """``E`` velocity fields ``v_e(z, t | s, a)``; estimates ``[E, B, G]`` by Euler integration."""

    def __init__(self, spec: CriticSpec, cfg: FlowCriticConfig) -> None:
        super().__init__(spec)
        self.cfg = cfg
        self.subset = min(2, cfg.num_members)
        G = spec.num_values
        in_dim = input_dim(spec) + G + 1 + 2 * cfg.time_frequencies
        self.fields = nn.ModuleList(
            mlp(in_dim, list(cfg.hidden_dims), G, cfg.activation) for _ in range(cfg.num_members)
        )

    def velocity(self, member: int, x: torch.Tensor, z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Member ``member``'s velocity ``[B, G]`` at value ``z`` ``[B, G]``, time ``t`` ``[B, G]``, input ``x``."""
        feats = time_features(t[:, :1], self.cfg.time_frequencies)
        return self.fields[member](torch.cat([x, z, feats], dim=-1))

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[E, B, G]``: each member's flow integrated from ``z_0 = 0`` over ``K`` steps."""
        x = critic_input(obs, self.check_action(action))
        z0 = torch.zeros(x.shape[0], self.spec.num_values, device=x.device, dtype=x.dtype)
        return torch.stack([
            euler_integrate(lambda z, t, e=e: self.velocity(e, x, z, t), z0, self.cfg.num_steps)
            for e in range(len(self.fields))
        ])

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor | None, target: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Conditional flow matching of every member towards the TD target ``[B, G]``."""
        x = critic_input(obs, self.check_action(action))
        w = self.cfg.init_width
        losses = []
        for e in range(len(self.fields)):
            z0 = (torch.rand_like(target) * 2.0 - 1.0) * w
            t = torch.rand_like(target[:, :1]).expand_as(target)
            zt = (1.0 - t) * z0 + t * target
            losses.append((self.velocity(e, x, zt, t) - (target - z0)).pow(2).mean())
        loss = torch.stack(losses).mean()
        return loss, {"critic_loss": loss.detach(), "target_mean": target.detach().mean()}
