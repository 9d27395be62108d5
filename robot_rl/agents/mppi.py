"""MPPI over a world-model critic's latent model: TD-MPC2's planner, used by :mod:`robot_rl.agents.tdmpc`.

Sample action sequences around a Gaussian, score them by the model's predicted rewards plus the critic as
terminal value, refit the Gaussian to the softmax-weighted elites, and return the plan's mean and std
(:meth:`MPPI.plan_sequence`) or its first action (:meth:`MPPI.plan`). The planner reads the world model
(:class:`robot_rl.critics.world_model.WorldModelCritic`, Q kind) only through its public model:
``encode``, ``next``, ``predict_reward``, ``estimates``. Warm starts are the previous step's mean shifted by
one (:func:`shift_plan`), as TD-MPC2 does.

Shapes: ``B`` batch, ``H`` planning horizon, ``A`` actions, ``Z`` latent, ``S`` candidate sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from robot_rl.config.checks import check, fail
from robot_rl.critics.world_model import WorldModelCritic

Policy = Callable[[torch.Tensor], torch.Tensor]
"""A latent policy ``[N, Z] -> [N, A]`` in ``[-1, 1]`` (may sample)."""


@dataclass
class MPPIConfig:
    """``agent.plan.*``: MPPI settings (TD-MPC2's, scaled down for small tasks).

    Attributes:
        horizon: ``H``, steps of every planned sequence.
        samples: Gaussian candidate sequences per round.
        elites: best candidates the Gaussian is refitted to.
        iterations: refitting rounds.
        temperature: softmax temperature of the elite weights.
        min_std, max_std: bounds of the sampling std (actions live in ``[-1, 1]``; the std starts at ``max_std``).
        gamma: discount of the planned returns.
        policy_samples: candidates per round that are the latent policy's own rollouts when the planner is
            given one (TD-MPC2: 24).
    """

    horizon: int = 3
    samples: int = 256
    elites: int = 32
    iterations: int = 4
    temperature: float = 0.5
    min_std: float = 0.05
    max_std: float = 2.0
    gamma: float = 0.99
    policy_samples: int = 24

    def __post_init__(self) -> None:
        check(self, "agent.plan", positive=("temperature", "min_std", "max_std"), unit=("gamma",),
              at_least_1=("horizon", "samples", "elites", "iterations"), at_least_0=("policy_samples",))
        if self.elites > self.samples:
            raise fail(self, "agent.plan", "elites", f"must be <= samples={self.samples}", f"at most {self.samples}")
        if self.min_std > self.max_std:
            raise fail(self, "agent.plan", "min_std", f"must be <= max_std={self.max_std}", f"at most {self.max_std}")


class MPPI:
    """MPPI with settings ``cfg`` over the latent model of ``model`` (a Q world-model critic)."""

    def __init__(self, cfg: MPPIConfig, model: WorldModelCritic) -> None:
        if not model.takes_action:
            raise ValueError("MPPI needs a Q world-model critic (action_dim > 0)")
        self.cfg, self.model = cfg, model

    @torch.no_grad()
    def plan(self, obs: torch.Tensor, policy: Policy | None = None, generator: torch.Generator | None = None,
             explore: bool = False, warm_start: torch.Tensor | None = None) -> torch.Tensor:
        """First action ``[B, A]`` in ``[-1, 1]`` of :meth:`plan_sequence` for raw ``obs`` ``[B, D]``; ``explore`` adds
        the final sampling std times Gaussian noise (TD-MPC2's exploration while training)."""
        mean, std = self.plan_sequence(obs, policy, generator, warm_start)
        return first_action(mean, std, explore, generator)

    @torch.no_grad()
    def plan_sequence(self, obs: torch.Tensor, policy: Policy | None = None, generator: torch.Generator | None = None,
                      warm_start: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The planned mean and std ``[B, H, A]`` for raw ``obs`` ``[B, D]``.

        Returns are ``sum_t gamma^t sum_g r_g(z_t, a_t) + gamma^H mean_e sum_g Q_e(z_H, a_H)`` with
        ``a_H = policy(z_H)`` or, without one, the sequence's last action. With a policy, ``policy_samples`` of
        the candidates in every round are its own rollouts through the latent model (TD-MPC2). The first round
        samples around ``warm_start`` ``[B, H, A]`` (:func:`shift_plan` of the previous mean) or zeros; the std
        always starts at ``max_std``.
        """
        c, model = self.cfg, self.model
        B, A, H = obs.shape[0], model.spec.action_dim, c.horizon
        if warm_start is not None and warm_start.shape != (B, H, A):
            raise ValueError(f"warm_start must be [B, plan horizon, A] = {[B, H, A]}, got {list(warm_start.shape)}")
        P = c.policy_samples if policy is not None else 0
        S = c.samples + P
        z = model.encode(obs)
        prior = self._policy_sequences(z.repeat_interleave(P, dim=0), policy, H).reshape(B, P, H, A) if P else None
        z0 = z.repeat_interleave(S, dim=0)  # [B*S, Z]
        mean = torch.zeros(B, H, A, device=obs.device) if warm_start is None else warm_start.clone()
        std = torch.full((B, H, A), c.max_std, device=obs.device)
        for _ in range(c.iterations):
            noise = torch.randn(B, c.samples, H, A, device=obs.device, generator=generator)
            actions = (mean[:, None] + std[:, None] * noise).clamp(-1.0, 1.0)  # [B, S, H, A]
            if prior is not None:
                actions = torch.cat([prior, actions], dim=1)
            value = self._sequence_value(z0, actions.reshape(B * S, H, A), policy).reshape(B, S)
            elite_value, idx = value.topk(c.elites, dim=1)
            elites = actions.gather(1, idx[:, :, None, None].expand(-1, -1, H, A))  # [B, K, H, A]
            score = torch.softmax(c.temperature * (elite_value - elite_value.max(1, keepdim=True).values), 1)
            mean = (score[:, :, None, None] * elites).sum(1)
            var = (score[:, :, None, None] * (elites - mean[:, None]).pow(2)).sum(1)
            std = var.sqrt().clamp(c.min_std, c.max_std)
        return mean, std

    def _policy_sequences(self, z: torch.Tensor, policy: Policy, horizon: int) -> torch.Tensor:
        """``[N, H, A]`` actions of ``policy`` rolled ``horizon`` steps through the latent model from ``[N, Z]``."""
        actions = []
        for _ in range(horizon):
            actions.append(policy(z))
            z = self.model.next(z, actions[-1])
        return torch.stack(actions, dim=1)

    def _sequence_value(self, z: torch.Tensor, actions: torch.Tensor, policy: Policy | None) -> torch.Tensor:
        """Discounted predicted return ``[N]`` of action sequences ``[N, H, A]`` from latents ``[N, Z]``."""
        model = self.model
        total = torch.zeros(z.shape[0], device=z.device)
        discount = 1.0
        for t in range(actions.shape[1]):
            total += discount * model.predict_reward(z, actions[:, t]).sum(-1)
            z = model.next(z, actions[:, t])
            discount *= self.cfg.gamma
        last = policy(z) if policy is not None else actions[:, -1]
        return total + discount * model.estimates(z, last).mean(0).sum(-1)


def first_action(
    mean: torch.Tensor, std: torch.Tensor, explore: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The action to execute ``[B, A]`` from a plan's mean and std ``[B, H, A]``: the mean's first step, plus
    ``std`` times Gaussian noise when exploring (clamped to ``[-1, 1]``)."""
    if not explore:
        return mean[:, 0]
    noise = torch.randn(mean[:, 0].shape, device=mean.device, generator=generator)
    return (mean[:, 0] + std[:, 0] * noise).clamp(-1.0, 1.0)


def shift_plan(mean: torch.Tensor) -> torch.Tensor:
    """TD-MPC2's warm start: a plan ``[B, H, A]`` advanced one step, ``out[:, t] = mean[:, t + 1]``, with the
    last step zero (the planner's cold start)."""
    return torch.cat([mean[:, 1:], torch.zeros_like(mean[:, :1])], dim=1)
