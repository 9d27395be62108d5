"""Soft Actor-Critic with automatic temperature (Haarnoja et al., "Soft Actor-Critic Algorithms
and Applications", 2018).

``agent=sac``. Tanh-squashed Gaussian actor; Q ensemble from the critic registry (default
``critic=ensemble``, two members = clipped double Q); the temperature ``alpha`` is tuned so the
policy entropy tracks ``target_entropy`` (default ``-A``). With ``critic.num_members=10``,
``target_reduce=random_min``, ``actor_reduce=mean`` and a high ``utd_ratio`` it is REDQ
(Chen et al. 2021). Defaults follow stable-baselines3's SAC.

Shapes: ``B`` batch, ``A`` actions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, register_agent
from robot_rl.agents.off_policy import OffPolicyAgent, OffPolicyConfig, SquashedGaussianActor
from robot_rl.config.checks import check
from robot_rl.data.replay_buffer import ReplayBatch


@dataclass
class SACConfig(OffPolicyConfig):
    """``agent=sac`` (the shared off-policy settings, plus).

    Attributes:
        init_alpha: initial temperature.
        alpha_lr: learning rate of ``log(alpha)``.
        target_entropy: entropy the temperature aims for; ``None`` = ``-action_dim``.
        autotune: learn ``alpha`` (False keeps ``init_alpha`` fixed).
        policy_frequency: actor and temperature updates every this many critic updates.
        target_frequency: target-network updates every this many critic updates.
        backup_entropy: keep ``-alpha * log pi`` of the next action in the TD target (the soft value). False
            backs up ``min Q'`` alone, as RLPD does on sparse-reward tasks whose episodes end on success:
            there an entropy bonus per step can outweigh the reward that ends the episode.
    """

    init_alpha: float = 1.0
    alpha_lr: float = 3e-4
    target_entropy: float | None = None
    autotune: bool = True
    policy_frequency: int = 1
    target_frequency: int = 1
    backup_entropy: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "agent", positive=("init_alpha",), at_least_1=("policy_frequency", "target_frequency"))


@register_agent("sac", SACConfig)
class SAC(OffPolicyAgent):
    """SAC; :meth:`learn` = critic step, then (every ``policy_frequency``) actor and alpha steps."""

    cfg: SACConfig

    def __init__(self, cfg: SACConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        self.actor_optimizer = self._optimizer(self.actor.parameters(), cfg.actor_lr)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr, fused=True)
        self.target_entropy = float(-env.action_dim if cfg.target_entropy is None else cfg.target_entropy)

    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """Tanh-squashed Gaussian MLP actor."""
        return SquashedGaussianActor(obs_dim, action_dim, self.cfg.actor_hidden_dims, self.cfg.activation).to(
            self.device
        )

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """A sample of the stochastic policy ``[N, A]``."""
        return self.actor.sample(obs)[0]

    @property
    def alpha(self) -> torch.Tensor:
        """Current temperature (detached scalar)."""
        return self.log_alpha.detach().exp()

    def critic_target(self, batch: ReplayBatch) -> torch.Tensor:
        """TD target ``[B, 1]``: ``r + discount * (min Q'(s', a') - alpha * log pi(a'|s'))`` (no log pi term
        without ``backup_entropy``)."""
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(batch.next_obs["policy"])
            next_q = self.critic(
                batch.next_obs[self.critic_group], next_action, reduce=self.cfg.target_reduce, target=True,
            )
            soft = next_q - self.alpha * next_log_prob.unsqueeze(-1) if self.cfg.backup_entropy else next_q
            return batch.reward.unsqueeze(-1) + batch.discount.unsqueeze(-1) * soft

    def actor_q(self, critic_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[B]`` the critic's value of the actor's action, members combined by ``actor_reduce``."""
        return self.critic(critic_obs, action, reduce=self.cfg.actor_reduce).squeeze(-1)

    def learn(self, batch: ReplayBatch) -> dict[str, float | torch.Tensor]:
        """Critic regression, then actor and temperature steps on the same batch."""
        critic_obs = batch.obs[self.critic_group]
        critic_loss, metrics = self.critic.loss(critic_obs, batch.action, self.critic_target(batch))
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        metrics = {f"loss/{k}": v for k, v in metrics.items()}
        if self.updates % self.cfg.policy_frequency == 0:
            metrics.update(self._actor_and_alpha_step(batch.obs["policy"], critic_obs))
        if self.updates % self.cfg.target_frequency == 0:
            self.critic.update_target(self.cfg.tau)
        return metrics

    def _actor_and_alpha_step(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Actor step (critic frozen), and the temperature step on the same ``log pi``.

        The two losses share no parameters (the actor loss sees ``alpha`` detached, the temperature loss
        ``log pi`` detached), so one backward of their sum gives each its own gradients; ``inputs=`` keeps
        the backward off the critic's weights (no critic gradients computed or accumulated).
        """
        action, log_prob = self.actor.sample(obs)
        actor_loss = (self.alpha * log_prob - self.actor_q(critic_obs, action)).mean()
        metrics = {"loss/actor": actor_loss.detach(), "train/entropy": -log_prob.detach().mean()}
        self.actor_optimizer.zero_grad(set_to_none=True)
        if self.cfg.autotune:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            (actor_loss + alpha_loss).backward(inputs=[*self.actor.parameters(), self.log_alpha])
            self.actor_optimizer.step()
            self.alpha_optimizer.step()
            metrics["loss/alpha"] = alpha_loss.detach()
        else:
            actor_loss.backward(inputs=list(self.actor.parameters()))
            self.actor_optimizer.step()
        metrics["train/alpha"] = self.alpha
        return metrics

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Critic, actor and temperature optimisers."""
        return {
            **super().optimizers(), "actor_optimizer": self.actor_optimizer, "alpha_optimizer": self.alpha_optimizer
        }

    def state_dict(self) -> dict[str, Any]:
        """The shared state plus ``log_alpha``."""
        return {**super().state_dict(), "log_alpha": self.log_alpha.detach().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
