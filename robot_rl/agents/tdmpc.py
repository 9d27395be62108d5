"""A TD-MPC2-style world-model agent: ``agent=tdmpc critic=world_model``.

Hansen, Su & Wang, "TD-MPC2: Scalable, Robust World Models for Continuous Control" (ICLR 2024). The
critic (:class:`robot_rl.critics.world_model.WorldModelCritic`, Q kind) *is* the world model: encoder
``z = h(o)``, latent dynamics, reward head and a Q ensemble. Every update

1. samples windows of ``horizon + 1`` observations and ``horizon`` actions/rewards from replay
   (:meth:`robot_rl.data.replay_buffer.ReplayBuffer.sample_windows`; steps after an episode end are masked),
2. builds TD targets ``r_t + gamma (1 - term_t) min_2 Q_target(h_target(o_{t+1}), pi(h(o_{t+1})))``,
3. trains encoder, dynamics, reward and Q heads jointly over the latent rollout
   (:meth:`~robot_rl.critics.world_model.WorldModelCritic.rollout_loss`: consistency, reward, TD),
4. trains the policy prior ``pi(z)`` (squashed Gaussian on detached latents of the window's
   observations) to maximise ``Q / scale`` plus a small entropy bonus; ``scale`` is a running estimate
   of the 5-95 percentile range of Q (TD-MPC2's return normalisation),
5. moves the target critic by Polyak averaging.

Acting (``act_with``): ``plan`` runs MPPI over the latent model with the Q ensemble as terminal value and
policy-prior rollouts among the candidates (:mod:`robot_rl.agents.mppi`, ``agent.plan.*``; exploration adds the
planner's final std as noise); ``policy`` acts with the policy prior only (no planning: ~10-100x cheaper per step).

The world model encodes the ``policy`` observation group (not privileged ``critic`` observations): the
planner and the prior act from it at deployment. The exported policy is the policy prior on the encoder:
``tanh(mu(h(o)))`` — the encoder is part of the deployed network, the dynamics, reward and Q heads are
not; planning is not exported (it needs the whole model and sampling at every step).

Not implemented from TD-MPC2: discrete (two-hot, symlog) regression of rewards and values (we regress
with squared error), warm-starting MPPI from the previous step's plan, multitask embeddings.

Shapes: ``N`` envs, ``B`` batch, ``T`` horizon, ``D`` policy obs, ``Z`` latent, ``A`` actions.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, Obs, register_agent
from robot_rl.agents.mppi import MPPI, MPPIConfig, first_action, shift_plan
from robot_rl.agents.off_policy import Metrics, OffPolicyAgent, OffPolicyConfig, SquashedGaussianActor
from robot_rl.critics.world_model import WorldModelCritic
from robot_rl.data.replay_buffer import WindowBatch

ACT_WITH = ("plan", "policy")


@dataclass
class TDMPCConfig(OffPolicyConfig):
    """``agent=tdmpc`` (shared off-policy settings; ``critic_lr`` trains the world model, ``actor_lr`` the prior).

    Attributes:
        horizon: ``T``, steps of the latent rollout each update trains over (TD-MPC2: 3).
        act_with: ``plan`` (MPPI over the model) or ``policy`` (the policy prior alone).
        entropy_coef: weight of the prior's entropy bonus (TD-MPC2: 1e-4).
        scale_tau: rate of the running Q-scale estimate.
        max_grad_norm: gradient-norm clip of the world model (TD-MPC2: 20).
        plan: the MPPI planner's settings (:class:`robot_rl.agents.mppi.MPPIConfig`).

    ``normalize_obs`` stays false: the world model normalises inside its encoder (``critic.normalize_obs``).
    """

    tau: float = 0.01
    learning_starts: int = 5000
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    horizon: int = 3
    act_with: str = "plan"
    entropy_coef: float = 1e-4
    scale_tau: float = 0.01
    max_grad_norm: float = 20.0
    plan: MPPIConfig = field(default_factory=MPPIConfig)

    critics: ClassVar[tuple[str, ...]] = ("world_model",)
    """The only ``critic=`` this agent trains: the world model it plans with."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.normalize_obs:
            raise ValueError("agent.normalize_obs=true is not for tdmpc: its world model normalises the observation "
                             "inside its encoder; set critic.normalize_obs=true instead")
        if self.horizon < 1:
            raise ValueError(f"agent.horizon must be >= 1, got {self.horizon}")
        if self.act_with not in ACT_WITH:
            raise ValueError(f"agent.act_with must be one of {ACT_WITH}, got {self.act_with!r}")
        if self.n_step != 1:
            raise ValueError(f"agent.n_step must be 1 for tdmpc (agent.horizon sets the rollout), got {self.n_step}")
        if not 0.0 < self.scale_tau <= 1.0 or self.max_grad_norm <= 0 or self.entropy_coef < 0:
            raise ValueError(f"agent.scale_tau must be in (0, 1], max_grad_norm > 0 and entropy_coef >= 0; got "
                             f"{self.scale_tau}, {self.max_grad_norm}, {self.entropy_coef}")


class LatentPolicy(nn.Module):
    """Deterministic prior on the encoder: raw obs ``[B, D]`` -> ``tanh(mu(h(o)))`` ``[B, A]`` in ``[-1, 1]``."""

    def __init__(self, normalizer: nn.Module, encoder: nn.Module, actor: nn.Module) -> None:
        super().__init__()
        self.normalizer, self.encoder, self.actor = normalizer, encoder, actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Action ``[B, A]`` in ``[-1, 1]``."""
        return self.actor(self.encoder(self.normalizer(obs)))


class PlanningPolicy(nn.Module):
    """Evaluation-only policy that plans with MPPI at every call: raw obs ``[B, D]`` -> env action ``[B, A]``.

    Not exportable (sampling, the whole world model); use it with ``robot_rl.train.evaluation.evaluate``.
    """

    def __init__(self, agent: TDMPC) -> None:
        super().__init__()
        self.agent = agent

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Planned env action ``[B, A]``."""
        return self.agent.to_env_action(self.agent.plan(obs, explore=False))


@register_agent("tdmpc", TDMPCConfig)
class TDMPC(OffPolicyAgent):
    """World model (the critic) + latent policy prior on the off-policy template; acts by MPPI planning or with the
    prior."""

    cfg: TDMPCConfig
    critic: WorldModelCritic
    critic_family = WorldModelCritic

    def __init__(self, cfg: TDMPCConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        # The world model encodes the policy group (the planner and prior act from it at deployment): the critic
        # reads and replay stores only that group.
        policy_only = dataclasses.replace(env, observation_dims={"policy": env.observation_dims["policy"]})
        super().__init__(cfg, critic_cfg, policy_only, device)
        self.actor_optimizer = self._optimizer(self.actor.parameters(), cfg.actor_lr)
        self.q_scale = torch.ones((), device=self.device)
        self.planner = MPPI(cfg.plan, self.critic)
        self.plan_mean = torch.zeros(env.num_envs, cfg.plan.horizon, env.action_dim, device=self.device)
        """``[N, H, A]`` each training env's last MPPI mean: shifted by one it warm-starts the next plan
        (TD-MPC2); zero for an env whose episode just ended (:meth:`on_step`)."""

    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """The policy prior: a squashed Gaussian on latents ``[B, Z]``."""
        Z = self.critic.latent_dim
        return SquashedGaussianActor(Z, action_dim, list(self.cfg.actor_hidden_dims), self.cfg.activation).to(
            self.device)

    # --- acting --------------------------------------------------------------------------------

    def _prior_sample(self, z: torch.Tensor) -> torch.Tensor:
        return self.actor.sample(z)[0]

    @torch.no_grad()
    def plan(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """MPPI action ``[B, A]`` in ``[-1, 1]`` for raw policy obs ``[B, D]`` (prior samples among candidates),
        planned from scratch (no warm start: any batch, e.g. evaluation envs)."""
        return self.planner.plan(obs, policy=self._prior_sample, explore=explore)

    @torch.no_grad()
    def plan_warm(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploring MPPI action ``[N, A]`` for the training envs' policy obs ``[N, D]``, warm-started from
        :attr:`plan_mean` shifted by one step; stores the new plan there."""
        if obs.shape[0] != self.plan_mean.shape[0]:
            raise ValueError(f"act(deterministic=False) plans for the {self.plan_mean.shape[0]} training envs "
                             f"(warm-started per env), got {obs.shape[0]} observations; evaluate other envs with "
                             "deterministic=True or planning_policy()")
        mean, std = self.planner.plan_sequence(obs, policy=self._prior_sample, warm_start=shift_plan(self.plan_mean))
        self.plan_mean = mean
        return first_action(mean, std, explore=True)

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """Collecting past warm-up, for raw policy obs ``[N, D]``: MPPI warm-started per env, or a prior sample."""
        if self.cfg.act_with == "plan":
            return self.plan_warm(obs)
        return self._prior_sample(self.critic.encode(obs))

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """Evaluation: MPPI from scratch (leaving the warm starts alone), or the prior's mean action."""
        if self.cfg.act_with == "plan":
            return self.plan(obs, explore=False)
        return self.actor(self.critic.encode(obs))

    def on_step(self, obs: Obs, step: Any, done: torch.Tensor) -> None:
        """A done env's MPPI plan is reset (its next episode plans from scratch); the encoder's statistics take
        the observation."""
        self.plan_mean[done] = 0.0
        self.critic.update_normalizer(obs["policy"])

    # --- learning ------------------------------------------------------------------------------

    def sample_batch(self) -> WindowBatch:
        """Windows of ``horizon + 1`` raw observations (the world model normalises inside its encoder)."""
        return self.buffer.sample_windows(self.cfg.batch_size, self.cfg.horizon)

    def learn(self, batch: WindowBatch) -> Metrics:
        """One joint world-model step over the latent rollout, one policy-prior step, one target step."""
        cfg, critic = self.cfg, self.critic
        obs, T = batch.obs["policy"], batch.actions.shape[0]
        rewards = batch.rewards.unsqueeze(-1)  # [T, B, 1]
        with torch.no_grad():
            next_obs = obs[1:].flatten(0, 1)
            next_action = self._prior_sample(critic.encode(next_obs)).reshape(T, -1, self.env.action_dim)
            discount = cfg.gamma * (~batch.terminated).float()
            td = critic.td_targets(obs[1:], next_action, rewards, discount)
        loss, metrics = critic.rollout_loss(obs, batch.actions, rewards, td, batch.alive)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(critic.parameters(), cfg.max_grad_norm)
        self.critic_optimizer.step()
        out = {f"loss/{k}": v for k, v in metrics.items()}
        out["train/grad_norm"] = grad_norm.detach()
        out.update(self._learn_prior(obs[:-1], batch.alive))
        critic.update_target(cfg.tau)
        return out

    def _learn_prior(self, obs: torch.Tensor, alive: torch.Tensor) -> Metrics:
        """Prior step on detached latents of ``obs`` ``[T, B, D]``: maximise ``Q / scale`` + entropy,
        weighted ``rho^t``."""
        cfg, critic = self.cfg, self.critic
        with torch.no_grad():
            z = critic.encode(obs.flatten(0, 1))
        action, log_prob = self.actor.sample(z)
        critic.requires_grad_(False)
        q = critic.head_estimates(z, action, critic.random_heads()).mean(0).squeeze(-1).float()  # [TB]
        critic.requires_grad_(True)
        with torch.no_grad():
            spread = torch.quantile(q, 0.95) - torch.quantile(q, 0.05)
            self.q_scale.lerp_(spread.clamp(min=1.0), cfg.scale_tau)
        T = obs.shape[0]
        weight = (critic.rho ** torch.arange(T, device=obs.device, dtype=q.dtype))[:, None] * alive.float()
        per_sample = (cfg.entropy_coef * log_prob - q / self.q_scale).reshape(T, -1)
        loss = (per_sample * weight).sum() / weight.sum().clamp(min=1.0)
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_optimizer.step()
        return {"loss/actor": loss.detach(), "train/q_scale": self.q_scale.detach().clone(),
                "train/entropy": -log_prob.detach().mean()}

    # --- persistence and export ----------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """Prior and world model (the agent keeps no observation normaliser of its own)."""
        return {"actor": self.actor, "critic": self.critic}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """World-model and prior optimisers."""
        return {**super().optimizers(), "actor_optimizer": self.actor_optimizer}

    def state_dict(self) -> dict[str, Any]:
        """The template's state plus the Q scale and the MPPI warm starts."""
        return {**super().state_dict(), "q_scale": self.q_scale.clone(), "plan_mean": self.plan_mean.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.q_scale.copy_(state["q_scale"])
        if "plan_mean" in state:  # checkpoints from before the MPPI warm start plan from scratch
            self.plan_mean.copy_(state["plan_mean"])

    def export_actor(self) -> nn.Module:
        """A detached copy of the policy prior on the encoder: raw obs ``[B, D]`` -> ``[B, A]`` in ``[-1, 1]``.

        Holds the critic's observation normaliser and encoder (the prior acts on latents), not its
        dynamics, reward or Q heads."""
        return LatentPolicy(copy.deepcopy(self.critic.normalizer), copy.deepcopy(self.critic.encoder),
                            copy.deepcopy(self.actor))

    def planning_policy(self) -> nn.Module:
        """An evaluation-only policy that plans with MPPI (shares the live networks; not exportable)."""
        return PlanningPolicy(self)
