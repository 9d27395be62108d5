"""Flow PPO: PPO on a fine-tuned VLA's action expert with per-denoising-step Gaussian likelihoods
(``agent=vla_ppo``; pi-RL, Chen et al. 2025, and RLinf's ``flow-sde``).

The SFT run's VLA (``agent.policy=<agent=vla run dir>``) is copied; its prefix (image encoder, text, state,
transformer) stays frozen and its action expert (:meth:`VLA.expert_parameters`) is trained. With ``head_lr`` > 0 (an
``efficientnet_lite0_film`` VLA) its instructed keypoint head and global-condition MLP are trained too
(:meth:`VLA.head_parameters`): each chunk keeps the frozen backbone's features of its images, the instruction and the
joints instead of the context, and the update re-encodes them through the head being trained (the keypoints are what
the expert can at best act on: docs/vla.md, "From the 5-minute recipe's policies"). Collection is the
chunk-level one of :mod:`robot_rl.agents._vla_chunks`: at each chunk boundary the frozen prefix encodes the env
once, a value critic ``V([f, elapsed])`` scores the feature, and the chunk is sampled by the **flow-SDE** chain of
:mod:`robot_rl.math.flow_sde` (``noise_level`` ``a``: Euler-Maruyama steps ``x_{k+1} ~ N(mean_k, std_k^2)`` from
``N(0, I)`` noise at ``t = 1`` to the chunk at ``t = 0``), whose states ``[K + 1, H, A]`` and log-likelihood are
kept with the context tokens it attended to. After ``rollout_chunks`` finished chunk transitions (all envs):

1. chunk-level GAE per env (:func:`robot_rl.math.advantages.gae` with the chunk's discount ``gamma^K``; an episode
   that ends inside a chunk is terminal: the critic sees the elapsed fraction of the episode);
2. ``epochs`` x ``minibatches`` PPO steps: the chains are re-scored under the expert being trained
   (:func:`~robot_rl.math.flow_sde.chain_log_prob`, no re-rendering: the stored context is the frozen prefix's, or
   with ``head_lr`` re-encoded from the stored features), :func:`~robot_rl.math.ppo_objective.clipped_surrogate` on
   the normalised advantages, and the value critic regressed onto the GAE returns (``critic=world_model``: a
   World-Critic-Model value whose latent must also predict the next chunk's latent and the chunk's return,
   ``WorldModelCritic.aux_loss`` on the chunk transitions); with ``demo_coef`` > 0 the expert's loss adds
   ``demo_coef`` times its flow-matching loss on a batch of the SFT run's own demonstrations (a BC anchor: the
   demonstrations stay in the loop; the frozen prefix's keypoints of every frame are computed once,
   ``VLAAgent.demonstration_batches``; with ``head_lr`` the frozen backbone's features instead, so the loss trains
   the head as SFT did, without its keypoint supervision); with ``keypoint_coef`` > 0 (needs ``head_lr``) the head's
   loss adds ``keypoint_coef`` times SFT's keypoint loss on the rollout's own frames, its label the image position of
   the instructed target where the simulator has it now (``EnvSpec.target_positions``, privileged state: training
   only; the deployed policy still reads images only). SFT supervised the head on the demonstrations' frames only;
   this supervises it on the frames the policy itself visits; ``demo_keypoint_coef`` adds SFT's keypoint loss on the
   demonstration batch as well, and ``policy_trains_head=False`` stops PPO's gradient at the context (the head then
   learns from the demonstration and keypoint losses only); with ``self_imitation_coef`` > 0 the expert's loss adds
   its flow-matching loss on the mini-batch's own executed chunks whose (normalised) advantage is positive
   (self-imitation, Oh et al. 2018, on the flow: the chunks that did better than the critic expected, regressed from
   fresh noise, so the deployed zero-noise chain moves towards them; no ratio, so no importance weights to explode).

With ``sde_step=one`` (RLinf's default mixed ODE-SDE sampling) only one uniformly drawn denoising step of each chain
is Gaussian and the rest are Euler steps; PPO's ratio is then taken per element of the executed actions at that step
(:func:`~robot_rl.math.flow_sde.step_log_prob`) instead of over the whole chain (``K x H x A`` terms summed).

The deployed policy is the fine-tuned VLA played as SFT plays it (deterministic Euler from zero noise,
:class:`~robot_rl.models.vla.policy.VLAPolicy`), so evaluation, export and the ROS node take it unchanged.

Shapes: ``N`` envs, ``n`` envs at a chunk boundary, ``B`` mini-batch, ``P`` context tokens, ``D`` width, ``K``
denoising steps, ``H`` chunk length, ``A`` actions.
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
from robot_rl.errors import InputError
from robot_rl.math import flow_sde
from robot_rl.math.advantages import gae
from robot_rl.math.ppo_objective import clipped_surrogate
from robot_rl.models.vla import flow
from robot_rl.models.vla.model import Context, keypoint_loss


@dataclass
class VLAPPOConfig(AgentConfig):
    """``agent=vla_ppo`` (configs/agent/vla_ppo.yaml).

    Attributes:
        policy: the SFT run directory (``agent=vla``) whose action expert is fine-tuned (required).
        execute_len: actions of each chunk played before the next query (0: the SFT run's).
        gamma: discount per env step (a chunk of ``K`` steps discounts its successor by ``gamma^K``).
        lam: GAE lambda over chunk transitions.
        noise_level: the flow-SDE's ``a`` (exploration: the first step's std; 0 would be the deterministic policy).
        initial_noise_scale: std of the chain's starting noise at ``t = 1`` (1: the flow's ``N(0, I)``; 0: the
            deployed policy's zero noise, the exploration then the SDE's alone). The deployed policy decodes zero
            noise, which on reach_lang succeeds far more often than ``N(0, I)`` draws (docs/vla.md, "The deployed
            policy is not the one sampled"); a smaller scale collects near the policy that is deployed. PPO's ratio
            is unchanged by it (the chain's likelihood is conditional on its start).
        rollout_chunks: finished chunk transitions (all envs) per PPO update.
        epochs, minibatches: PPO passes over a rollout and mini-batches per pass.
        clip: PPO's ratio clip.
        expert_lr: Adam rate of the action expert (small: it starts from a fine-tuned policy).
        critic_lr: Adam rate of the value critic.
        max_grad_norm: gradient clipping of the expert and of the critic, each.
        iteration_steps: env steps (all envs) per log row.
        sde_step: ``all``: every denoising step Gaussian, PPO's ratio the whole chain's (pi-RL's joint likelihood);
            ``one``: one uniformly drawn step per chunk Gaussian, the rest Euler, and PPO's ratio per element of the
            executed actions at that step (RLinf's default mixed ODE-SDE sampling: far smaller ratios).
        demo_coef: weight of the flow-matching loss on the SFT run's demonstrations beside the PPO loss (0: none).
        demo_batch: demonstration frames per PPO mini-batch step.
        head_lr: Adam rate of the keypoint head and the global-condition MLP (``efficientnet_lite0_film`` VLAs;
            0: they stay as SFT left them, only the expert is trained).
        keypoint_coef: weight of the keypoint loss on the rollout's frames against the simulator's target position
            (module docstring; 0: none; needs ``head_lr`` > 0 and a world-fixed camera among the SFT run's).
        policy_coef: weight of PPO's clipped surrogate (1: flow PPO; 0: an ablation that keeps everything else, the
            rollouts, the value critic and the ``demo_coef`` / ``keypoint_coef`` losses, without the policy gradient).
        demo_keypoint_coef: weight of SFT's keypoint loss on the demonstration batch (0: none; needs ``head_lr``,
            ``demo_coef`` > 0 and an SFT run trained with ``target_keypoint``): the head labelled on the
            demonstrations' frames as SFT labelled it, beside ``keypoint_coef``'s labels on the rollout's frames.
        policy_trains_head: whether PPO's surrogate trains the head too (with ``head_lr``); False: its gradient stops
            at the context, so only the demonstration and keypoint losses move the head.
        self_imitation_coef: weight of the flow-matching loss on the rollout's executed chunks with a positive
            advantage (module docstring; 0: none). Its gradient stops at the context as PPO's does. Its one measured
            run (weight 1 beside the demonstrations, reach_lang) drove the policy to 0% (docs/vla.md).
    """

    critics: ClassVar[tuple[str, ...]] = ("mlp", "world_model")

    policy: str | None = None
    execute_len: int = 0
    gamma: float = 0.99
    lam: float = 0.95
    noise_level: float = 0.5
    initial_noise_scale: float = 1.0
    rollout_chunks: int = 256
    epochs: int = 4
    minibatches: int = 4
    clip: float = 0.2
    expert_lr: float = 1e-5
    critic_lr: float = 1e-3
    max_grad_norm: float = 1.0
    iteration_steps: int = 2048
    sde_step: str = "all"
    demo_coef: float = 0.0
    demo_batch: int = 64
    head_lr: float = 0.0
    keypoint_coef: float = 0.0
    policy_coef: float = 1.0
    demo_keypoint_coef: float = 0.0
    policy_trains_head: bool = True
    self_imitation_coef: float = 0.0

    def __post_init__(self) -> None:
        check(self, "agent", positive=("noise_level", "clip", "expert_lr", "critic_lr", "max_grad_norm"),
              unit=("gamma", "lam"), non_negative=("demo_coef", "head_lr", "keypoint_coef", "policy_coef",
                                                             "demo_keypoint_coef", "initial_noise_scale",
                                                             "self_imitation_coef"),
              at_least_0=("execute_len",),
              at_least_1=("rollout_chunks", "epochs", "minibatches", "iteration_steps", "demo_batch"),
              choices={"sde_step": ("all", "one")})


@register_agent("vla_ppo", VLAPPOConfig)
class VLAPPOAgent(VLAChunkAgent):
    """Flow PPO on the VLA's action expert (module docstring)."""

    cfg: VLAPPOConfig
    key = "vla_ppo"

    def __init__(self, cfg: VLAPPOConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu",
                 base_policy: BasePolicy | None = None):
        super().__init__(cfg, critic_cfg, env, device, base_policy)
        self.model = copy.deepcopy(self.sft.model).eval()  # eval: no dropout in the chains' likelihoods
        for p in self.model.expert_parameters():
            p.requires_grad_(True)
        self.critic = make_critic(critic_cfg, CriticSpec(obs_dim=self.feature_dim + 1)).to(self.device)
        self.expert_opt = torch.optim.Adam(self.model.expert_parameters(), lr=cfg.expert_lr)
        self.head_opt = None
        if cfg.head_lr > 0:
            if not self.model.instructed_images:
                raise InputError("agent.head_lr trains an instructed keypoint head: the SFT policy has none",
                                 key="agent.head_lr", value=cfg.head_lr,
                                 fix="agent.head_lr=0, or post-train an SFT run with "
                                     "agent.image_encoder=efficientnet_lite0_film (recipe=vla_reach_lang)")
            for p in self.model.head_parameters():
                p.requires_grad_(True)
            self.head_opt = torch.optim.Adam(self.model.head_parameters(), lr=cfg.head_lr)
        self.supervise_keypoints = cfg.keypoint_coef > 0
        if self.supervise_keypoints:
            self._check_keypoint_labels(env)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.steps = self.model.config.num_steps
        self.pending_rows: dict[str, torch.Tensor] = {}  # per env: what its chunk in play was chosen from
        self.rollout: list[dict[str, torch.Tensor]] = []  # finished transitions, in the order they finished
        self.rollout_size = 0
        self.num_updates = 0
        self.open_demonstrations(base_policy, frozen_prefix=self.head_opt is None)
        if cfg.demo_keypoint_coef > 0:
            self._check_demo_keypoint_labels()

    def _check_keypoint_labels(self, env: EnvSpec) -> None:
        """``keypoint_coef`` needs the head trained and something to label its frames with.

        Raises:
            InputError: ``keypoint_coef`` without ``head_lr``, or no target position or world camera to label with.
        """
        cfg = self.cfg
        if self.head_opt is None:
            raise InputError("agent.keypoint_coef supervises the keypoint head, which only agent.head_lr trains",
                             key="agent.keypoint_coef", value=cfg.keypoint_coef,
                             fix="add agent.head_lr=1e-4 (an efficientnet_lite0_film SFT run), "
                                 "or agent.keypoint_coef=0")
        if env.target_positions is None or not set(self.sft.cameras) & set(env.world_cameras):
            raise InputError("agent.keypoint_coef needs the task's target position and a world-fixed camera among the "
                             "SFT run's cameras", key="agent.keypoint_coef", value=cfg.keypoint_coef,
                             fix=f"a task with a target and world cameras {list(env.world_cameras)} among "
                                 f"{list(self.sft.cameras)}, or agent.keypoint_coef=0")

    def _check_demo_keypoint_labels(self) -> None:
        """``demo_keypoint_coef`` needs the head trained and demonstrations that carry SFT's keypoint labels.

        Raises:
            InputError: without ``head_lr``, without ``demo_coef``, or an SFT run trained without ``target_keypoint``.
        """
        cfg, key = self.cfg, "agent.demo_keypoint_coef"
        if self.head_opt is None or self.demos is None:
            raise InputError("agent.demo_keypoint_coef supervises the keypoint head on the demonstration batch, which "
                             "needs agent.head_lr and agent.demo_coef", key=key, value=cfg.demo_keypoint_coef,
                             fix="add agent.head_lr=1e-4 agent.demo_coef=1.0, or agent.demo_keypoint_coef=0")
        if self.demos.target_key is None:  # SFT read no target position: its labels, if any, are the gripper's
            raise InputError("the SFT run's demonstrations carry no keypoint labels (it was trained without "
                             "agent.target_keypoint)", key=key, value=cfg.demo_keypoint_coef,
                             fix="post-train an SFT run trained with agent.target_keypoint > 0, "
                                 "or agent.demo_keypoint_coef=0")

    def keypoint_labels(self, rows: torch.Tensor) -> torch.Tensor:
        """``[n, C, 1, 2]`` where the target of envs ``rows`` appears now in each SFT camera (NaN in a moving one: no
        loss there), x right and y down in [-1, 1]."""
        target = self.env.target_positions(rows).float().cpu()
        return self.env.image_positions({"target": target}, self.sft.cameras).to(self.device)

    # --- collecting -------------------------------------------------------------------------------------------

    def acting_model(self) -> Any:
        """The VLA being fine-tuned (its prefix is the SFT run's unless ``head_lr`` trains the head)."""
        return self.model

    def _velocity(self, context: Any):
        return lambda x, t: self.model.velocity(x, t, context)

    def choose(self, rows: torch.Tensor, context: Any, feature: torch.Tensor, critic_obs: torch.Tensor,
               inputs: dict, deterministic: bool) -> torch.Tensor:
        """The expert's flow-SDE chain from ``N(0, initial_noise_scale^2 I)`` (Euler from zero noise when
        ``deterministic``)."""
        state = inputs["state"]
        if deterministic:
            noise = torch.zeros(len(rows), *self.chunk_shape, device=self.device)
            return self.model.decode(context, state, noise).clamp(-1.0, 1.0)
        noise = torch.randn(len(rows), *self.chunk_shape, generator=self.generator).to(self.device)
        noise = noise * self.cfg.initial_noise_scale
        one = self.cfg.sde_step == "one"
        step = torch.randint(0, self.steps, (len(rows),), generator=self.generator).to(self.device) if one else None
        chain = flow_sde.sample_chain(self._velocity(context), noise, self.steps, self.cfg.noise_level,
                                      self.sample_generator, step)
        kept = {"states": chain.states, "value": self.critic(critic_obs)[:, 0], "obs": critic_obs}
        if self.head_opt is None:  # the context itself: the prefix is frozen
            kept.update(tokens=context.tokens, pad=context.pad)
            if context.condition is not None:
                kept["condition"] = context.condition
        else:  # what the head re-encodes in the update
            kept.update({"instruction": inputs["tokens"], "instruction_mask": inputs["token_mask"], "state": state,
                         **{f"features/{c}": f for c, f in inputs["image_features"].items()}})
            if self.supervise_keypoints:
                kept["keypoint_label"] = self.keypoint_labels(rows)
        if one:  # PPO's ratio is per executed element at the Gaussian step, not the chain's
            kept["sde_step"] = step
            kept["element_log_prob"] = self._element_log_prob(context, chain.states, step)
        else:
            kept["log_prob"] = chain.log_prob
        for name, value in kept.items():
            if name not in self.pending_rows:
                self.pending_rows[name] = torch.zeros(self.env.num_envs, *value.shape[1:], dtype=value.dtype,
                                                      device=self.device)
            self.pending_rows[name][rows] = value
        return self.model.to_actions(chain.sample, state).clamp(-1.0, 1.0)

    def store(self, rows: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              next_obs: torch.Tensor) -> None:
        """Into the on-policy rollout, with ``V(next_obs)`` (unused at discount 0)."""
        if not self.pending_rows:  # chunks chosen deterministically (evaluation) are not learned from
            return
        with torch.no_grad():
            next_value = self.critic(next_obs)[:, 0]
        self.rollout.append({**{k: v[rows].clone() for k, v in self.pending_rows.items()}, "env": rows.clone(),
                             "reward": reward.clone(), "discount": discount.clone(), "next_value": next_value,
                             "next_obs": next_obs.clone()})
        self.rollout_size += len(rows)

    @torch.no_grad()
    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """``V([f, elapsed])`` ``[1, N, 1]`` where each env started a chunk at the last :meth:`act`, NaN inside a
        chunk (``critic_at_chunk_starts``)."""
        values = self.critic(self.obs_at)
        return values.masked_fill(~self.started.view(-1, 1), float("nan")).unsqueeze(0)

    # --- learning ---------------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """A full rollout of ``rollout_chunks`` finished chunk transitions."""
        return self.rollout_size >= self.cfg.rollout_chunks

    def advantages(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages [T], returns [T])`` of the rollout: GAE along each env's transitions in order, with the
        chunk's own discount (``gamma^K``, 0 where the episode ended)."""
        advantages = torch.zeros_like(batch["reward"])
        for env in batch["env"].unique():
            idx = torch.nonzero(batch["env"] == env).squeeze(1)
            ended = batch["discount"][idx] == 0
            step = float(batch["discount"][idx][~ended].max()) if (~ended).any() else 0.0
            adv, _ = gae(batch["reward"][idx, None], batch["value"][idx, None], batch["next_value"][idx, None],
                         ended[:, None], ended[:, None], step, self.cfg.lam)
            advantages[idx] = adv[:, 0]
        return advantages, advantages + batch["value"]

    def update(self) -> dict[str, float | torch.Tensor]:
        """PPO epochs over the rollout: ``loss/policy``, ``loss/value``, ``ratio`` spread, ``approx_kl``."""
        cfg = self.cfg
        batch = {k: torch.cat([r[k] for r in self.rollout]) for k in self.rollout[0]}
        self.rollout, self.rollout_size = [], 0
        self.critic.update_normalizer(batch["obs"])
        advantages, returns = self.advantages(batch)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        size = len(advantages)
        metrics: dict[str, torch.Tensor] = {}
        for _ in range(cfg.epochs):
            for mb in torch.randperm(size, generator=self.generator).chunk(cfg.minibatches):
                metrics = self._ppo_step({k: v[mb] for k, v in batch.items()}, advantages[mb], returns[mb])
        self.num_updates += 1
        return {**metrics, "updates": float(self.num_updates)}

    def stored_context(self, mb: dict[str, torch.Tensor]) -> Any:
        """The :class:`~robot_rl.models.vla.model.Context` that rollout rows ``mb`` were chosen from, as the model
        being trained now has it: stored (frozen prefix), or re-encoded from the stored features (``head_lr``)."""
        return self._stored_context_and_keypoints(mb)[0]

    def _stored_context_and_keypoints(self, mb: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor | None]:
        """:meth:`stored_context` and, re-encoded with ``head_lr``, the keypoints ``[B, C, K, 2]`` it was made from
        (None with the prefix frozen)."""
        if self.head_opt is None:
            return Context(mb["tokens"], mb["pad"], mb.get("condition")), None
        features = {c: mb[f"features/{c}"] for c in self.sft.cameras}
        return self.model.encode_with_keypoints({"image_features": features, "tokens": mb["instruction"],
                                                 "token_mask": mb["instruction_mask"], "state": mb["state"]})

    def _ppo_step(self, mb: dict[str, torch.Tensor], advantages: torch.Tensor, returns: torch.Tensor
                  ) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        head_context, points = self._stored_context_and_keypoints(mb)
        context = head_context if cfg.policy_trains_head else head_context.detached()  # what PPO's gradient reaches
        if cfg.sde_step == "one":  # a ratio per executed action element at the chain's one Gaussian step
            log_prob = self._element_log_prob(context, mb["states"], mb["sde_step"]).flatten(1)
            old_log_prob = mb["element_log_prob"].flatten(1)
            each = advantages[:, None].expand_as(log_prob)
            policy_loss, ratio = clipped_surrogate(log_prob.flatten(), old_log_prob.flatten(), each.flatten(), cfg.clip)
        else:
            log_prob = flow_sde.chain_log_prob(self._velocity(context), mb["states"], cfg.noise_level).sum(1)
            old_log_prob = mb["log_prob"]
            policy_loss, ratio = clipped_surrogate(log_prob, old_log_prob, advantages, cfg.clip)
        demo_keypoint = None
        if self.demos is None:
            demo_loss = None
        else:
            demo_parts = self.demo_losses(keypoints=cfg.demo_keypoint_coef > 0)
            demo_loss, demo_keypoint = demo_parts["flow"], demo_parts.get("keypoint")
        loss = cfg.policy_coef * policy_loss
        if demo_loss is not None:
            loss = loss + cfg.demo_coef * demo_loss
        if demo_keypoint is not None:  # SFT's labels on the demonstrations' frames
            loss = loss + cfg.demo_keypoint_coef * demo_keypoint[0]
        imitation = None
        if cfg.self_imitation_coef > 0:  # the chunks that beat the critic's expectation, as flow-matching targets
            imitation = self._self_imitation_loss(context, mb["states"][:, -1], advantages)
            loss = loss + cfg.self_imitation_coef * imitation
        keypoint = None
        if self.supervise_keypoints:  # the head's own supervision, on the frames the policy visited
            keypoint = keypoint_loss(points[:, :, 0], mb["keypoint_label"][:, :, 0])
            loss = loss + cfg.keypoint_coef * keypoint
        optimizers = [self.expert_opt] + ([] if self.head_opt is None else [self.head_opt])
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], cfg.max_grad_norm)
            opt.step()
        value_loss, _ = self.critic.loss(mb["obs"], None, returns.unsqueeze(1))
        critic_loss, model_metrics = value_loss, {}
        if self.critic.needs_successors:  # a world-model value also predicts the next chunk's latent and return
            model_loss, model_metrics = self.critic.aux_loss({
                "critic_obs": mb["obs"], "next_critic_obs": mb["next_obs"], "rewards": mb["reward"].unsqueeze(1),
                "next_valid": mb["discount"] > 0})
            critic_loss = value_loss + model_loss
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
        self.critic_opt.step()
        with torch.no_grad():
            approx_kl = (old_log_prob - log_prob).mean()
        demo = {} if demo_loss is None else {"loss/demo": demo_loss.detach()}
        if keypoint is not None:
            demo["loss/keypoint_target"] = keypoint.detach()
        if demo_keypoint is not None:
            demo["loss/demo_keypoint_target"] = demo_keypoint[0].detach()
        if imitation is not None:
            demo["loss/self_imitation"] = imitation.detach()
            demo["self_imitation_share"] = (advantages > 0).float().mean()
        return {"loss/policy": policy_loss.detach(), "loss/value": value_loss.detach(),
                "ratio_max": ratio.detach().max(), "approx_kl": approx_kl, **demo, **model_metrics}

    def _self_imitation_loss(self, context: Any, chunks: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """Flow-matching loss of the expert under ``context`` on standardised chunks ``[B, H, A]`` (the chains'
        samples) from fresh noise, their executed steps only, each weighted 1 where ``advantages [B]`` > 0, else 0."""
        noise = torch.randn(chunks.shape, generator=self.generator).to(self.device)
        t = flow.sample_time(len(chunks), self.generator).to(self.device)
        predicted = self.model.velocity(flow.interpolate(chunks, noise, t), t, context)
        executed = torch.zeros(chunks.shape[:2], dtype=torch.bool, device=self.device)
        executed[:, : self.execute_len] = True
        return flow.flow_loss(predicted, chunks, noise, executed, weight=(advantages > 0).float())

    def _element_log_prob(self, context: Any, states: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """``[B, execute_len, A]`` elementwise log-likelihood of chains ``states [B, K + 1, H, A]`` at their one
        Gaussian step ``step [B]`` under the expert, on the actions the env executes."""
        return flow_sde.step_log_prob(self._velocity(context), states, self.cfg.noise_level, step)[
            :, : self.execute_len]

    # --- what is saved and deployed ---------------------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The fine-tuned VLA and the value critic."""
        return {"model": self.model, "critic": self.critic}

    def state_dict(self) -> dict[str, Any]:
        """The VLA (its expert trained), critic, optimisers, generator, counters (a rollout in progress is not
        kept: a resumed run collects a fresh one)."""
        return {"model": self.model.state_dict(), "critic": self.critic.state_dict(),
                "expert_opt": self.expert_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "generator": self.generator.get_state(), "num_updates": self.num_updates,
                "chunks_collected": self.chunks_collected,
                **({} if self.head_opt is None else {"head_opt": self.head_opt.state_dict()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.model.load_state_dict(state["model"])
        self.critic.load_state_dict(state["critic"])
        self.expert_opt.load_state_dict(state["expert_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.head_opt is not None:
            self.head_opt.load_state_dict(state["head_opt"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        self.chunks_collected = int(state["chunks_collected"])

    def policy(self) -> nn.Module:
        """A :class:`~robot_rl.models.vla.policy.VLAPolicy` of a copy of the fine-tuned VLA."""
        from robot_rl.models.vla.policy import VLAPolicy

        return VLAPolicy(copy.deepcopy(self.model).eval(), self.sft.tokenizer, self.sft.instructions)
