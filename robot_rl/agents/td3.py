"""Twin Delayed DDPG (Fujimoto, van Hoof & Meger, "Addressing Function Approximation Error in
Actor-Critic Methods", ICML 2018), with DDPG (Lillicrap et al. 2016) as its degenerate setting.

``agent=td3``: deterministic tanh actor with Gaussian exploration noise; clipped double Q
(``critic=ensemble``, two members, ``target_reduce=min``); target policy smoothing (clipped noise
on the target action); delayed actor and target updates (``policy_delay=2``).

``agent=ddpg`` (``configs/agent/ddpg.yaml``) is the same class with ``policy_delay=1``,
``target_policy_noise=0`` and a one-member critic (``critic.num_members=1``), which is DDPG
with TD3's exploration noise.

Shapes: ``B`` batch, ``N`` envs, ``A`` actions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, register_agent
from robot_rl.agents.off_policy import DeterministicActor, OffPolicyAgent, OffPolicyConfig
from robot_rl.config.checks import check
from robot_rl.data.replay_buffer import ReplayBatch


@dataclass
class TD3BaseConfig(OffPolicyConfig):
    """TD3's settings (the shared off-policy settings, plus), shared by ``agent=td3`` and ``agent=chunked_td3``.

    Attributes:
        exploration_noise: std of the Gaussian noise added to actions while collecting.
        target_policy_noise: std of the smoothing noise on target actions (0 = DDPG).
        target_noise_clip: the smoothing noise is clipped to ``[-clip, clip]``.
        policy_delay: actor and target updates every this many critic updates (1 = DDPG).
    """

    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    actor_reduce: str = "mean"
    exploration_noise: float = 0.1
    target_policy_noise: float = 0.2
    target_noise_clip: float = 0.5
    policy_delay: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "agent", non_negative=("exploration_noise", "target_policy_noise", "target_noise_clip"),
              at_least_1=("policy_delay",))


@dataclass
class TD3Config(TD3BaseConfig):
    """``agent=td3`` (:class:`TD3BaseConfig`, plus).

    Attributes:
        use_target_actor: bootstrap with a Polyak-averaged actor copy (TD3, DDPG) or with the
            online actor (FastTD3).
    """

    learning_starts: int = 25_000
    use_target_actor: bool = True


@register_agent("td3", TD3Config)
class TD3(OffPolicyAgent):
    """TD3 / DDPG; :meth:`learn` = critic step, then (every ``policy_delay``) actor and targets."""

    cfg: TD3Config

    def __init__(self, cfg: TD3Config, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        self.actor_optimizer = self._optimizer(self.actor.parameters(), cfg.actor_lr)
        self.actor_target: nn.Module | None = None
        if cfg.use_target_actor:
            self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)

    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """Deterministic tanh MLP actor."""
        return DeterministicActor(obs_dim, action_dim, self.cfg.actor_hidden_dims, self.cfg.activation).to(
            self.device
        )

    def exploration_std(self, num: int) -> torch.Tensor:
        """``[num, 1]`` std of the exploration noise of each env (one shared value for TD3)."""
        return torch.full((num, 1), self.cfg.exploration_noise, device=self.device)

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """``clip(actor(obs) + N(0, std^2), -1, 1)`` ``[N, A]``."""
        action = self.actor(obs)
        return (action + torch.randn_like(action) * self.exploration_std(action.shape[0])).clamp(-1.0, 1.0)

    def next_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """Smoothed target action ``[B, A]``: target (or online) actor plus clipped noise."""
        actor = self.actor_target if self.actor_target is not None else self.actor
        action = actor(next_obs)
        noise = (torch.randn_like(action) * self.cfg.target_policy_noise).clamp(
            -self.cfg.target_noise_clip, self.cfg.target_noise_clip
        )
        return (action + noise).clamp(-1.0, 1.0)

    def critic_target(self, batch: ReplayBatch, next_action: torch.Tensor) -> torch.Tensor:
        """TD target ``[B, 1]``: ``r + discount * min Q'(s', a')``."""
        next_q = self.critic(
            batch.next_obs[self.critic_group], next_action, reduce=self.cfg.target_reduce, target=True,
        )
        return batch.reward.unsqueeze(-1) + batch.discount.unsqueeze(-1) * next_q

    def learn(self, batch: ReplayBatch) -> dict[str, float | torch.Tensor]:
        """Critic regression; every ``policy_delay`` updates also the actor and the targets."""
        critic_obs = batch.obs[self.critic_group]
        with torch.no_grad():
            target = self.critic_target(batch, self.next_action(batch.next_obs["policy"]))
        critic_loss, metrics = self.critic.loss(critic_obs, batch.action, target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        metrics = {f"loss/{k}": v for k, v in metrics.items()}
        if self.updates % self.cfg.policy_delay == 0:
            self.critic.requires_grad_(False)
            q = self.critic(critic_obs, self.actor(batch.obs["policy"]), reduce=self.cfg.actor_reduce)
            actor_loss = -q.mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optimizer.step()
            self.critic.requires_grad_(True)
            metrics["loss/actor"] = actor_loss.detach()
            self.critic.update_target(self.cfg.tau)
            if self.actor_target is not None:
                self.polyak(self.actor_target, self.actor, self.cfg.tau)
        return metrics

    def networks(self) -> dict[str, nn.Module]:
        """Actor, critic, normalisers and the target actor when there is one."""
        nets = super().networks()
        if self.actor_target is not None:
            nets["actor_target"] = self.actor_target
        return nets

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Critic and actor optimisers."""
        return {**super().optimizers(), "actor_optimizer": self.actor_optimizer}
