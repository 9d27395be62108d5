"""Critic-guided flow: a fine-tuned VLA's action expert regressed toward chunks shifted by a chunk critic's action
gradient, with a trust region to the SFT expert (``agent=vla_guided``; Q-guided flow / value-gradient guidance).

The SFT run's VLA (``agent.policy=<agent=vla run dir>``) is copied; its prefix stays frozen and its action expert
(:meth:`VLA.expert_parameters`) is trained. Collection is the chunk-level one of :mod:`robot_rl.agents._vla_chunks`:
at each chunk boundary the frozen prefix encodes the env once and the expert decodes a chunk from ``noise_scale``
times ``N(0, I)`` noise (Euler, as SFT samples; zero noise when deterministic). The critic ``Q([f, elapsed], x)``
scores the executed part ``x [E * A]`` of the chunk in the flow's standardised space (before the state anchor and the
clip to ``[-1, 1]``, which belong to the environment). Its transition ``(f, x, R, gamma^K, f')`` enters a
:class:`~robot_rl.data.chunk_transitions.ChunkTransitionBuffer`. Each gradient step (``utd_ratio`` per chunk):

1. critic: ``Q(f, x) <- R + gamma^K * min_j Q_target_j(f', x')``, ``x'`` the current expert's chunk at ``f'`` from
   fresh noise (clipped double Q; default ``critic=ensemble_ln``);
2. expert (after ``expert_starts`` chunk transitions, so the critic has learned something first): at the batch's
   features, the current expert samples chunks ``a`` (no gradient), the critic's gradient ``g = grad_a min_j Q`` on
   the executed steps shifts them, ``a' = a + eta * g / ||g||`` (:func:`~robot_rl.models.vla.guided_flow.
   guided_action`; the unexecuted tail keeps ``g = 0``), and the expert regresses onto ``a'`` by flow matching with
   ``beta`` times the squared distance to the SFT expert's velocity as trust region
   (:func:`~robot_rl.models.vla.guided_flow.guided_flow_loss`; nothing backpropagates through sampling). At the
   fixed point the samples sit ``eta / beta`` (standardised units) from the SFT policy's along the ascent
   direction: ``eta / beta`` bounds how far one critic can pull the VLA. With ``demo_coef`` > 0 the expert's loss
   adds its flow-matching loss on the SFT run's demonstrations (a BC anchor, as ``agent=vla_ppo``);
3. the critic's target copy by Polyak averaging (``tau``).

The expert reads only the VLA's global condition (``action_expert=mlp``), which is the second half of the
critic's feature ``f`` (:func:`~robot_rl.models.vla.steering.context_feature`): the replay rows carry everything the
update decodes from. A transformer expert would need its prefix tokens stored per chunk; it is refused with the fix.

The deployed policy is the fine-tuned VLA played as SFT plays it (:class:`~robot_rl.models.vla.policy.VLAPolicy`), so
evaluation, export and the ROS node take it unchanged.

Shapes: ``N`` envs, ``n`` envs at a chunk boundary, ``B`` batch, ``F = 2D`` the feature, ``H`` chunk length, ``E``
executed actions per chunk, ``A`` actions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from robot_rl.agents._vla_chunks import VLAChunkAgent
from robot_rl.agents.base import BasePolicy, EnvSpec, Obs, register_agent
from robot_rl.config.checks import check
from robot_rl.config.schema import AgentConfig
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.data.chunk_transitions import ChunkTransitionBuffer
from robot_rl.models.vla import flow
from robot_rl.models.vla.guided_flow import action_gradient, guided_action, guided_flow_loss


@dataclass
class VLAGuidedConfig(AgentConfig):
    """``agent=vla_guided`` (configs/agent/vla_guided.yaml).

    Attributes:
        policy: the SFT run directory (``agent=vla`` with ``action_expert=mlp``) whose expert is fine-tuned (required).
        execute_len: actions of each chunk played before the next query (0: the SFT run's).
        noise_scale: std of the initial noise of collected chunks (1: the flow's own ``N(0, I)``; exploration).
        eta: length of the critic-gradient shift of the regression targets (standardised action units).
        beta: weight of the trust region to the SFT expert's velocity (the samples settle ``eta / beta`` away).
        gamma: discount per env step (a chunk of ``K`` steps discounts its successor by ``gamma^K``).
        tau: Polyak rate of the critic's target copy.
        batch_size: chunk transitions per gradient step.
        buffer_size: chunk transitions kept.
        learning_starts: chunk transitions collected before the first critic step.
        expert_starts: chunk transitions collected before the first expert step (>= ``learning_starts``).
        utd_ratio: gradient steps per collected chunk transition.
        expert_lr, critic_lr: Adam learning rates.
        max_grad_norm: gradient clipping of the expert.
        demo_coef: weight of the flow-matching loss on the SFT run's demonstrations (0: none).
        demo_batch: demonstration frames per expert step.
        iteration_steps: env steps (all envs) per log row.
    """

    critics: ClassVar[tuple[str, ...]] = ("ensemble", "ensemble_ln", "mlp")

    policy: str | None = None
    execute_len: int = 0
    noise_scale: float = 1.0
    eta: float = 0.1
    beta: float = 1.0
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    buffer_size: int = 100_000
    learning_starts: int = 512
    expert_starts: int = 2048
    utd_ratio: float = 1.0
    expert_lr: float = 1e-4
    critic_lr: float = 3e-4
    max_grad_norm: float = 1.0
    demo_coef: float = 0.0
    demo_batch: int = 64
    iteration_steps: int = 2048

    def __post_init__(self) -> None:
        check(self, "agent", positive=("utd_ratio", "expert_lr", "critic_lr", "tau", "max_grad_norm"),
              non_negative=("noise_scale", "eta", "beta", "demo_coef"), unit=("gamma",), at_least_0=("execute_len",),
              at_least_1=("batch_size", "buffer_size", "learning_starts", "expert_starts", "demo_batch",
                          "iteration_steps"))
        if self.expert_starts < self.learning_starts:
            raise ValueError(f"agent.expert_starts = {self.expert_starts} is below agent.learning_starts = "
                             f"{self.learning_starts}: the expert would follow a critic that has not been trained; "
                             f"set agent.expert_starts >= {self.learning_starts}")

    def steps_before_update(self, num_envs: int) -> int:
        """Env steps before the first update: ``learning_starts`` chunks of at least one step each."""
        return self.learning_starts


@register_agent("vla_guided", VLAGuidedConfig)
class VLAGuidedAgent(VLAChunkAgent):
    """Critic-guided flow matching on the VLA's action expert (module docstring)."""

    cfg: VLAGuidedConfig
    key = "vla_guided"

    def __init__(self, cfg: VLAGuidedConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu",
                 base_policy: BasePolicy | None = None):
        super().__init__(cfg, critic_cfg, env, device, base_policy)
        self.require_condition_expert("agent=vla_guided", "use agent=vla_rl / vla_ppo")
        self.model = copy.deepcopy(self.sft.model).eval()
        for p in self.model.expert_parameters():
            p.requires_grad_(True)
        self.executed_dim = self.execute_len * self.chunk_shape[1]
        self.critic = make_critic(critic_cfg, CriticSpec(obs_dim=self.feature_dim + 1, action_dim=self.executed_dim))
        self.critic.to(self.device)
        self.critic.target_critic()
        self.expert_opt = torch.optim.Adam(self.model.expert_parameters(), lr=cfg.expert_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.buffer = ChunkTransitionBuffer(cfg.buffer_size, self.feature_dim + 1, self.executed_dim, self.device)
        self.action_at = torch.zeros(env.num_envs, self.executed_dim, device=self.device)
        self.num_updates = 0
        self.expert_updates = 0
        self.owed = 0.0
        self.open_demonstrations(base_policy, frozen_prefix=True)

    # --- collecting -------------------------------------------------------------------------------------------

    def acting_model(self) -> Any:
        """The VLA being fine-tuned (its prefix is the SFT run's, frozen)."""
        return self.model

    def choose(self, rows: torch.Tensor, context: Any, feature: torch.Tensor, critic_obs: torch.Tensor,
               inputs: dict, deterministic: bool) -> torch.Tensor:
        """The expert's Euler chunk from ``noise_scale * N(0, I)`` noise (zero noise when ``deterministic``)."""
        noise = torch.zeros(len(rows), *self.chunk_shape, device=self.device)
        if not deterministic:
            noise = self.cfg.noise_scale * torch.randn(noise.shape, generator=self.generator).to(self.device)
        x0 = self.model.denoise(context, noise)
        self.action_at[rows] = self.executed(x0)
        return self.model.to_actions(x0, inputs["state"]).clamp(-1.0, 1.0)

    def store(self, rows: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              next_obs: torch.Tensor) -> None:
        """Into the replay buffer; ``utd_ratio`` gradient steps owed per transition."""
        self.buffer.add(self.obs_at[rows], self.action_at[rows], reward, discount, next_obs)
        self.owed += self.cfg.utd_ratio * len(rows)

    @torch.no_grad()
    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """Critic members ``[E, N, 1]``: ``Q([f, elapsed], x)`` of the chunk each env started at the last :meth:`act`
        (call it right after), NaN for envs inside a chunk (``critic_at_chunk_starts``)."""
        values = self.critic(self.obs_at, self.action_at, reduce="none")
        return values.masked_fill(~self.started.view(1, -1, 1), float("nan"))

    # --- learning ---------------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """Past ``learning_starts`` chunk transitions, with a gradient step owed (``utd_ratio`` per transition)."""
        return len(self.buffer) >= self.cfg.learning_starts and self.owed >= 1.0

    def update(self) -> dict[str, float | torch.Tensor]:
        """Every owed gradient step: ``loss/critic``, ``q_mean``; once the expert trains, ``loss/flow``,
        ``loss/trust``, the critic's gain of the shifted chunks ``guided_gain`` (and ``loss/demo``)."""
        steps = int(self.owed)
        self.owed -= steps
        metrics: dict[str, torch.Tensor] = {}
        for _ in range(steps):
            metrics = self._step()
        return {**metrics, "updates": float(self.num_updates), "expert_updates": float(self.expert_updates)}

    def sample_chunks(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """``[B, H, A]`` standardised chunks the expert being trained samples at critic observations ``[B, F + 1]``
        from ``N(0, I)`` noise, without gradient."""
        noise = torch.randn(len(critic_obs), *self.chunk_shape, generator=self.generator).to(self.device)
        with torch.no_grad():
            return self.model.denoise(self.condition_context(critic_obs), noise)

    def _step(self) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        batch = self.buffer.sample(cfg.batch_size, self.generator)
        with torch.no_grad():
            next_action = self.executed(self.sample_chunks(batch.next_obs))
            next_q = self.critic(batch.next_obs, next_action, reduce="min", target=True)[:, 0]
            target = batch.reward + batch.discount * next_q
        critic_loss, info = self.critic.loss(batch.obs, batch.action, target.unsqueeze(1))
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        metrics = {"loss/critic": critic_loss.detach(), "q_mean": info["value_mean"]}
        if len(self.buffer) >= cfg.expert_starts:
            metrics.update(self._expert_step(batch.obs))
        self.critic.update_target(cfg.tau)
        self.num_updates += 1
        return metrics

    def _expert_step(self, critic_obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Step 2 of the module docstring at critic observations ``[B, F + 1]``."""
        cfg = self.cfg

        def q(chunks: torch.Tensor) -> torch.Tensor:
            return self.critic(critic_obs, self.executed(chunks), reduce="min")[:, 0]

        chunks = self.sample_chunks(critic_obs)
        shifted = guided_action(chunks, action_gradient(q, chunks), cfg.eta, normalize=True)
        context = self.condition_context(critic_obs)
        noise = torch.randn(chunks.shape, generator=self.generator).to(self.device)
        t = flow.sample_time(len(chunks), self.generator).to(self.device)
        loss, parts = guided_flow_loss(lambda x, s: self.model.velocity(x, s, context),
                                       lambda x, s: self.sft.model.velocity(x, s, context), shifted, noise, t, cfg.beta)
        demo = self.demo_losses()["flow"] if self.demos is not None else None
        self.expert_opt.zero_grad(set_to_none=True)
        (loss if demo is None else loss + cfg.demo_coef * demo).backward()
        nn.utils.clip_grad_norm_(self.model.expert_parameters(), cfg.max_grad_norm)
        self.expert_opt.step()
        self.expert_updates += 1
        with torch.no_grad():
            gain = (q(shifted) - q(chunks)).mean()
        out = {"loss/flow": parts["flow"], "loss/trust": parts["trust"], "guided_gain": gain}
        return out if demo is None else {**out, "loss/demo": demo.detach()}

    # --- what is saved and deployed ---------------------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The fine-tuned VLA and the chunk critic."""
        return {"model": self.model, "critic": self.critic}

    def state_dict(self) -> dict[str, Any]:
        """The VLA (its expert trained), critic (and its target), optimisers, replay, generator, counters."""
        return {"model": self.model.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic.target_state_dict(), "expert_opt": self.expert_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "buffer": self.buffer.state_dict(),
                "generator": self.generator.get_state(), "num_updates": self.num_updates,
                "expert_updates": self.expert_updates, "chunks_collected": self.chunks_collected, "owed": self.owed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (chunks in flight at the checkpoint are not restored: a resumed run starts
        fresh episodes)."""
        self.model.load_state_dict(state["model"])
        self.critic.load_state_dict(state["critic"])
        self.critic.load_target_state_dict(state["critic_target"])
        self.expert_opt.load_state_dict(state["expert_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if "buffer" in state:  # the runner drops it when a run is opened with another env count (eval, export)
            self.buffer.load_state_dict(state["buffer"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        self.expert_updates = int(state["expert_updates"])
        self.chunks_collected = int(state["chunks_collected"])
        self.owed = float(state["owed"])

    def policy(self) -> nn.Module:
        """A :class:`~robot_rl.models.vla.policy.VLAPolicy` of a copy of the fine-tuned VLA."""
        from robot_rl.models.vla.policy import VLAPolicy

        return VLAPolicy(copy.deepcopy(self.model).eval(), self.sft.tokenizer, self.sft.instructions)
