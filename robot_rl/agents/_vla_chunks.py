"""Chunk-level collection shared by the agents that post-train a fine-tuned VLA in batched sim (``agent=vla_rl``,
``agent=vla_ppo``).

The SFT run's VLA (``agent.policy=<agent=vla run dir>``, opened by the runner: :class:`~robot_rl.agents.BasePolicy`)
plays chunks as its evaluation does: at each chunk boundary of env ``i`` the agent reads that env's cameras,
instruction and joints (``EnvSpec.vla_inputs``: only the envs that need a new chunk are rendered), encodes them
once (``context``), takes the feature ``f = context_feature(context)`` ``[F]`` and asks the subclass for the chunk
(:meth:`VLAChunkAgent.choose`); the first ``execute_len`` actions are played open loop. The chunk's transition
``(f, R = sum_k gamma^k r_k, discount = gamma^K, f')`` is handed to :meth:`VLAChunkAgent.store` once the next chunk
boundary gives ``f'``, or at once with discount 0 when the episode ends inside the chunk. The critic of every such
agent reads ``[f, elapsed fraction of the episode]``, so a time limit is a terminal state of a finite-horizon
problem (``Agent.critic_at_chunk_starts``).

Shapes: ``N`` envs, ``n`` envs at a chunk boundary, ``F`` the feature's width
(:func:`~robot_rl.models.vla.steering.context_feature_dim`), ``H`` chunk length, ``A`` actions.
"""

from __future__ import annotations

import abc
from typing import Any

import torch

from robot_rl.agents.base import Agent, BasePolicy, EnvSpec, Obs
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.errors import InputError


def frozen_sft_policy(base: BasePolicy | None, run_dir: str | None, agent: str):
    """The frozen :class:`~robot_rl.models.vla.policy.VLAPolicy` and the chunk execution of the SFT run.

    Raises:
        InputError: no run given, or the run is not an ``agent=vla`` run.
    """
    if not run_dir or base is None:
        raise InputError(f"agent={agent} needs the SFT run it post-trains", key="agent.policy",
                         fix="agent.policy=<run dir of robot-rl train agent=vla ...> (e.g. recipe=vla_reach_lang)")
    if base.policy_inputs != "vla":
        raise InputError("agent.policy is not a VLA run", file=run_dir, key="agent.policy",
                         value=type(base.policy).__name__, fix="give the run dir of an agent=vla training")
    base.policy.requires_grad_(False)
    return base.policy, base.execution


class VLAChunkAgent(Agent):
    """The module docstring's collection; subclasses choose the chunks and learn from the stored transitions."""

    policy_inputs = "vla"
    base_policy_key = "policy"
    critic_at_chunk_starts = True
    key = "vla_rl"
    """The agent's config key, for error messages."""

    def __init__(self, cfg: Any, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu",
                 base_policy: BasePolicy | None = None):
        super().__init__(cfg, critic_cfg, env, device)
        if env.vla_inputs is None:
            raise InputError(f"agent={self.key} acts from cameras and instructions: the task has none",
                             key="task.env", fix="a language task with the SFT run's cameras, e.g. "
                                                 "task=so101_reach_lang task.env.cameras=[front,top]")
        self.sft, sft_execution = frozen_sft_policy(base_policy, cfg.policy, self.key)
        self.sft.to(self.device).eval()
        model = self.sft.model.config
        if model.action_dim != env.action_dim:
            raise InputError("the SFT policy's actions do not fit this task", key="agent.policy", value=cfg.policy,
                             fix=f"an SFT run on a task with {env.action_dim} actions")
        self.execute_len = cfg.execute_len or sft_execution.execute_len
        if self.execute_len > model.chunk_len:
            raise InputError("agent.execute_len is longer than the SFT policy's chunk", key="agent.execute_len",
                             value=self.execute_len, fix=f"agent.execute_len <= {model.chunk_len} (0: the SFT run's)")
        self.chunk_shape = (model.chunk_len, model.action_dim)
        self.noise_dim = model.chunk_len * model.action_dim
        from robot_rl.models.vla.steering import context_feature_dim

        self.feature_dim = context_feature_dim(self.sft.model)
        self.generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
        self.sample_generator = self.generator if self.device.type == "cpu" else None
        n = env.num_envs
        self.plan = torch.zeros(n, self.execute_len, env.action_dim, device=self.device)
        self.left = torch.zeros(n, dtype=torch.long, device=self.device)  # actions of the plan still to play
        self.elapsed = torch.zeros(n, device=self.device)  # env steps into the episode
        self.pending = torch.zeros(n, dtype=torch.bool, device=self.device)  # a chunk awaits its successor
        self.started = torch.zeros(n, dtype=torch.bool, device=self.device)  # a chunk began at the last act
        self.obs_at = torch.zeros(n, self.feature_dim + 1, device=self.device)  # critic obs where each chunk began
        self.reward_sum = torch.zeros(n, device=self.device)
        self.discount = torch.ones(n, device=self.device)
        self.chunks_collected = 0

    def open_demonstrations(self, base_policy: BasePolicy | None, frozen_prefix: bool) -> None:
        """``self.demos`` / ``self.demo_weights``: the SFT run's demonstrations where ``cfg.demo_coef`` > 0 (agents that
        fine-tune the expert keep them in the loop as a BC anchor), else None; ``frozen_prefix``: their frozen prefix's
        keypoints cached (``VLAAgent.demonstration_batches``) rather than the backbone's features.

        Raises:
            InputError: ``demo_coef`` > 0 without the SFT run's demonstrations.
        """
        self.demos, self.demo_weights = None, None
        if self.cfg.demo_coef > 0:
            if base_policy is None or base_policy.demonstrations is None:
                raise InputError("agent.demo_coef needs the SFT run's demonstrations", key="agent.demo_coef",
                                 value=self.cfg.demo_coef, fix="agent.policy=<an agent=vla run>, or agent.demo_coef=0")
            self.demos, self.demo_weights = base_policy.demonstrations(frozen_prefix)

    def demo_losses(self, keypoints: bool = False) -> dict[str, torch.Tensor]:
        """``{"flow": }`` the acting model's flow-matching loss on ``cfg.demo_batch`` frames of the SFT run's
        demonstrations, drawn as SFT drew them (its frame weights), plus with ``keypoints`` ``"keypoint" [P]``: SFT's
        keypoint losses of those frames against their labels (the head re-encoded from the backbone's features);
        :meth:`open_demonstrations` first."""
        from robot_rl.data.vla_batches import batch_to
        from robot_rl.models.vla import flow

        batch = batch_to(self.demos.sample(self.cfg.demo_batch, self.generator, self.demo_weights), self.device)
        noise = torch.randn(batch["action"].shape, generator=self.generator).to(self.device)
        t = flow.sample_time(len(noise), self.generator).to(self.device)
        return self.acting_model().losses(batch, batch["action"], noise, t, batch["action_is_pad"],
                                          batch["target"] if keypoints else None)

    def acting_model(self) -> Any:
        """The VLA whose prefix encodes the envs at chunk boundaries: the frozen SFT model (a subclass that trains part
        of the prefix returns its own)."""
        return self.sft.model

    def require_condition_expert(self, option: str, fix: str) -> None:
        """Refuse an SFT run whose action expert attends to the prefix tokens: ``option`` decodes chunks again from
        replayed critic observations (:meth:`condition_context`), which hold all an MLP expert reads.

        Raises:
            InputError: ``action_expert`` is not ``mlp`` (naming ``option`` and ``fix``).
        """
        expert = self.sft.model.config.action_expert
        if expert != "mlp":
            raise InputError(f"{option} replays the expert's input from the critic's feature, which holds for an MLP "
                             "expert (it reads the global condition alone)", key="agent.policy",
                             value=f"{self.cfg.policy} (action_expert={expert})",
                             fix="post-train an SFT run trained with agent.action_expert=mlp "
                                 f"agent.global_condition=true (recipe=vla_reach_lang), or {fix}")

    def executed(self, chunks: torch.Tensor) -> torch.Tensor:
        """``[B, E * A]``: the first ``execute_len`` steps of chunks ``[B, H, A]``, flattened (what the env plays of
        each chunk, and what a chunk critic scores)."""
        return chunks[:, : self.execute_len].flatten(1)

    def condition_context(self, critic_obs: torch.Tensor) -> Any:
        """The :class:`~robot_rl.models.vla.model.Context` an MLP expert reads, from critic observations
        ``[B, F + 1]``: their global condition ``f[:, D:]`` (no prefix tokens: the MLP expert does not attend;
        :meth:`require_condition_expert` first)."""
        from robot_rl.models.vla.model import Context

        width = self.sft.model.config.width
        condition = critic_obs[:, width: 2 * width]
        batch = len(condition)
        return Context(condition.new_zeros(batch, 0, width),
                       torch.zeros(batch, 0, dtype=torch.bool, device=condition.device), condition)

    @abc.abstractmethod
    def choose(self, rows: torch.Tensor, context: Any, feature: torch.Tensor, critic_obs: torch.Tensor,
               inputs: dict, deterministic: bool) -> torch.Tensor:
        """The chunks ``[n, H, A]`` (env actions in ``[-1, 1]``) envs ``rows`` start now, from the VLA's ``context``,
        its ``feature [n, F]``, the critic's observation ``critic_obs [n, F + 1]`` and what was encoded, ``inputs``
        (``state [n, S]``, ``tokens`` / ``token_mask [n, L]``, and ``image_features {camera: [n, F', h, w]}`` with
        an instructed keypoint head, else ``images {camera: uint8 [n, 3, H, W]}``); keep what :meth:`store` will need
        per env."""

    @abc.abstractmethod
    def store(self, rows: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              next_obs: torch.Tensor) -> None:
        """Keep the finished chunk transitions of envs ``rows``: return ``reward [n]``, ``discount [n]`` (0 where
        the episode ended) and the successor's critic observation ``next_obs [n, F + 1]`` (unused at discount 0)."""

    def _critic_obs(self, feature: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``[n, F + 1]``: the feature and the elapsed fraction of the episode of envs ``rows``."""
        fraction = (self.elapsed[rows] / self.env.max_episode_steps).unsqueeze(1)
        return torch.cat([feature, fraction], dim=1)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> torch.Tensor:
        """Actions ``[N, A]``: the next action of each env's chunk; envs at a chunk boundary get a new chunk
        (:meth:`choose`; their previous chunk's transition is completed with the new feature)."""
        from robot_rl.models.vla.steering import context_feature

        rows = torch.nonzero(self.left == 0).squeeze(1)
        if len(rows):
            images, texts, state = self.env.vla_inputs(rows)
            images = {c: images[c].to(self.device) for c in self.sft.cameras}
            state = state.to(self.device)
            self.sft.check_inputs(images, texts, state)
            tokens, mask = self.sft.encode_text(texts)
            model = self.acting_model()
            inputs = {"tokens": tokens.to(self.device), "token_mask": mask.to(self.device), "state": state}
            if model.instructed_images:  # the frozen backbone's features, which a subclass may keep (vla_ppo)
                inputs["image_features"] = {c: model.image_features(images[c]) for c in self.sft.cameras}
            else:
                inputs["images"] = images
            context = model.encode(inputs)
            feature = context_feature(context)
            critic_obs = self._critic_obs(feature, rows)
            waiting = self.pending[rows]
            self._finish(rows[waiting], critic_obs[waiting])
            chunk = self.choose(rows, context, feature, critic_obs, inputs, deterministic)
            self.plan[rows] = chunk[:, : self.execute_len]
            self.left[rows] = self.execute_len
            self.obs_at[rows] = critic_obs
            self.reward_sum[rows], self.discount[rows], self.pending[rows] = 0.0, 1.0, True
        self.started = torch.zeros_like(self.pending)
        self.started[rows] = True
        index = self.execute_len - self.left
        return self.plan[torch.arange(self.env.num_envs, device=self.device), index]

    def _finish(self, rows: torch.Tensor, next_obs: torch.Tensor, ended: bool = False) -> None:
        """Hand the pending chunk transitions of envs ``rows`` to :meth:`store` (``ended``: discount 0)."""
        if len(rows) == 0:
            return
        discount = torch.zeros(len(rows), device=self.device) if ended else self.discount[rows]
        self.store(rows, self.reward_sum[rows], discount, next_obs)
        self.pending[rows] = False
        self.chunks_collected += len(rows)

    def observe(self, obs: Obs, action: torch.Tensor, step: Any) -> None:
        """Add this step's reward to every env's chunk return; close the chunks of envs whose episode ended."""
        self.reward_sum += self.discount * step.reward.to(self.device)
        self.discount *= self.cfg.gamma
        self.left -= 1
        self.elapsed += 1
        done = (step.terminated | step.truncated).to(self.device)
        ended = torch.nonzero(done & self.pending).squeeze(1)
        self._finish(ended, self.obs_at[ended], ended=True)  # the successor is unused at discount 0
        self.left[done] = 0
        self.elapsed[done] = 0

    def start_episodes(self) -> None:
        """Forget every env's chunk in play."""
        self.left.zero_()
        self.elapsed.zero_()
        self.pending.zero_()

    def iteration_done(self, collected: int, updated: bool, final: bool) -> bool:
        """A log row every ``iteration_steps`` env steps (all envs) and at the end."""
        return collected >= self.cfg.iteration_steps or final

    def policy_chunking(self) -> tuple[int, ChunkExecution]:
        """The SFT policy's chunk, ``execute_len`` actions played open loop per query."""
        return self.sft.chunk_len, ChunkExecution("open_loop", self.execute_len, 0.0)
