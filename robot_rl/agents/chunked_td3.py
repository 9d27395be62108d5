"""TD3 over action chunks: a chunked actor trained against a chunked critic (Q-chunking, TD3-style).

``agent=chunked_td3 critic=chunked``. The actor outputs ``h = critic.chunk_len`` actions at once
(:class:`robot_rl.models.chunked_actor.ChunkedActor`); the critic ``Q(s_t, a_{t:t+h})`` is trained on
chunks sampled from replay with the chunk target of :func:`robot_rl.math.chunk_targets.chunk_return`
(``h`` rewards, one bootstrap ``gamma^h`` ahead, termination/truncation rules of that module; masked
chunks are left out of the loss); the actor maximises the critic with TD3's clipped double Q, target
policy smoothing and delayed updates (Fujimoto et al. 2018; the chunked critic follows Li, Zhou &
Levine 2025 and Seo & Abbeel's CQN-AS, 2024). Collection executes chunks open loop (or with ACT's
temporal ensembling) through :class:`robot_rl.models.chunked_actor.ChunkExecutor`, warm-up included, so
the replay data is open-loop consistent (the condition DQC shows chunked critics need).

The exported policy outputs the whole chunk ``[B, l*A]`` and its artifact carries the execution used to collect
(``policy.yaml`` ``chunk_length: l`` and ``chunk_execution``, :meth:`ChunkedTD3.policy_chunking`), so ``robot-rl
eval``, the artifact evaluation and the ROS policy node play it as training did.

Options:

- **DQC** (``critic.partial_len = l``, Li et al., "Decoupled Q-Chunking", 2026): the actor outputs only
  ``l`` actions and is trained to maximise the *partial* critic ``Q_P(s, a_{:l})``; the long critic
  ``Q(s, a_{:h})`` is trained on data chunks of ``h`` steps with bootstrap value
  ``V(s') = Q_P_target(s', pi_target(s'))``, and :meth:`ChunkedCritic.loss` distils it optimistically
  (expectile) into ``Q_P``. Collection plays ``l``-action chunks open loop (closed loop every ``l`` steps).
- **AC3** (Yang et al., AAAI 2026): ``success_only_actor`` updates the actor only on sampled states of
  episodes that ended in success (``info["success"]`` at their last step; no actor step when a batch holds
  none); ``intra_chunk_returns`` trains the critic towards the mean over the chunk's executed prefixes
  ``k = 1..h`` of the ``k``-step returns ``sum_{j<k} gamma^j r_{t+j} + gamma^k V(s_{t+k})``
  (:func:`robot_rl.math.chunk_targets.intra_chunk_returns`) instead of the ``h``-step return alone.
- **Demonstrations** (``agent.demos=<robot-rl record dataset>``, the setting Q-chunking is evaluated in):
  the demos form a separate, read-only replay partition (:class:`robot_rl.data.demo_source.DemoSource`);
  every batch is ``round(demo_fraction * B)`` demo *chunks* followed by online chunks, each partition
  sampled by :meth:`~robot_rl.data.replay_buffer.ReplayBuffer.sample_chunks` (same episode-end rules and masks),
  mixed by the one demo mixer (:mod:`robot_rl.data.demo_mix`; RLPD's symmetric sampling, Ball et al. 2023, at
  ``demo_fraction = 0.5``). ``bc_weight > 0`` adds
  ``bc_weight * ||pi(s) - a_demo||^2`` (over the executed steps of each demo chunk) to the actor loss on
  the demo rows, a TD3+BC-style behaviour regulariser (Q-chunking's QC-FQL also keeps its policy near the
  data). Demos recorded without ``observation.critic`` make the critic read the policy observation.
- **Offline-to-online** (the recipe that makes demo-augmented SAC work on sparse so101_lift, docs/results/demos.md,
  as :mod:`robot_rl.agents.rlpd` has it): ``bc_checkpoint=<robot-rl bc out dir>`` starts the actor (and the
  frozen observation normaliser; needs ``normalize_obs=true``) from a BC clone of the actor's own type: a
  ``chunked`` clone of ``l`` actions, or for ``l = 1`` a ``deterministic`` one (the same network);
  ``critic_warmup_updates`` trains the critic alone for that many updates first; ``bc_anchor=clone`` makes
  ``bc_weight`` pull the actor's whole chunk towards the frozen clone's on every state of the batch
  (``bc_weight * mean_k ||pi(s)_k - clone(s)_k||^2``) instead of towards the demo actions.

Shapes: ``N`` envs, ``B`` batch, ``h`` chunk, ``A`` actions, ``D`` / ``Dc`` policy / critic obs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, Obs, register_agent
from robot_rl.agents.bc import load_clone
from robot_rl.agents.off_policy import Metrics, OffPolicyAgent
from robot_rl.agents.td3 import TD3BaseConfig
from robot_rl.config.checks import check
from robot_rl.critics.base import reduce_members
from robot_rl.critics.chunked import ChunkedCritic
from robot_rl.data.demo_source import check_demo_settings, demo_groups, start_from_clone
from robot_rl.data.replay_buffer import ChunkBatch, ReplayBuffer
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.math.chunk_targets import intra_chunk_returns
from robot_rl.models.chunked_actor import MODES, ChunkedActor, ChunkExecutor, FlatChunk


@dataclass
class ChunkedTD3Config(TD3BaseConfig):
    """``agent=chunked_td3`` (TD3's settings; ``n_step`` must stay 1: the chunk is the horizon).

    Attributes:
        exploration_noise: std of the Gaussian noise on every action of a collected chunk.
        target_policy_noise, target_noise_clip: TD3's smoothing noise on the target chunk.
        policy_delay: actor and target updates every this many critic updates.
        execution: ``open_loop`` or ``temporal_ensemble`` while collecting.
        execute_len: open loop: actions played per chunk (0 = the whole chunk).
        ensemble_decay: temporal ensembling's ``m >= 0`` in ACT's weights ``w_i = exp(-m i)``, ``i = 0`` the oldest
            prediction of the step (older predictions weigh more; :mod:`robot_rl.deploy.chunking`).
        success_only_actor: AC3: actor updates only on states of successful episodes (needs ``info["success"]``).
        intra_chunk_returns: AC3: critic target = mean of the chunk's intra-chunk ``k``-step returns.
        demos: a ``robot-rl record`` dataset directory for the demo partition (None = online only).
        demo_fraction: share of every batch drawn (as chunks) from the demos (0.5 = RLPD's symmetric sampling).
        only_success_demos: keep only demo episodes that succeeded.
        bc_weight: ``> 0`` adds ``bc_weight * ||pi(s) - a_demo||^2`` on the batch's demo chunks to the actor loss
            (``bc_anchor=clone``: ``||pi(s) - clone(s)||^2`` on every state of the batch).
        bc_checkpoint: a ``robot-rl bc`` output directory (``--actor chunked --chunk-len l``, or ``deterministic``
            for ``l = 1``; the actor's widths) to start the actor and the (then frozen) normaliser from.
        critic_warmup_updates: the first this many updates train the critic only (0 = off).
        bc_anchor: ``demos`` (the demo actions, demo rows) or ``clone`` (the frozen ``bc_checkpoint`` actor's chunk).
    """

    execution: str = "open_loop"
    execute_len: int = 0
    ensemble_decay: float = 0.01
    success_only_actor: bool = False
    intra_chunk_returns: bool = False
    demos: str | None = None
    demo_fraction: float = 0.5
    only_success_demos: bool = False
    bc_weight: float = 0.0
    bc_checkpoint: str | None = None
    critic_warmup_updates: int = 0
    bc_anchor: str = "demos"

    critics: ClassVar[tuple[str, ...]] = ("chunked",)
    """The only ``critic=`` this agent trains: the chunked Q critic (scores action chunks)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_demo_settings(self)
        check(self, "agent", at_least_0=("execute_len",), choices={"execution": MODES})
        if self.n_step != 1:
            raise ValueError(
                f"agent.n_step must be 1 for chunked_td3 (critic.chunk_len is the horizon), got {self.n_step}"
            )
        if self.bc_weight > 0 and self.bc_anchor == "demos" and not self.demos:
            raise ValueError(f"agent.bc_weight={self.bc_weight} > 0 works only with demos "
                             "(agent.demos=<dataset dir>) or agent.bc_anchor=clone")
        if self.bc_checkpoint and not self.normalize_obs:
            raise ValueError(f"agent.bc_checkpoint={self.bc_checkpoint} was trained on normalised observations; "
                             "set agent.normalize_obs=true")
        if self.demos and self.success_only_actor and not self.only_success_demos:
            raise ValueError("agent.success_only_actor with agent.demos needs agent.only_success_demos=true "
                             "(demo states then count as states of successful episodes)")


@register_agent("chunked_td3", ChunkedTD3Config)
class ChunkedTD3(OffPolicyAgent):
    """Chunked actor + chunked critic on the off-policy template; replay of single steps, sampled as chunks and
    played by a :class:`ChunkExecutor`."""

    cfg: ChunkedTD3Config
    critic: ChunkedCritic
    critic_family = ChunkedCritic

    def __init__(self, cfg: ChunkedTD3Config, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        if cfg.demos:
            dims = demo_groups(cfg.demos, env.observation_dims, "chunked_td3")
            env = dataclasses.replace(env, observation_dims=dims)
        super().__init__(cfg, critic_cfg, env, device)
        if cfg.execute_len > self.actor_len:
            raise ValueError(f"agent.execute_len={cfg.execute_len} exceeds the actor's chunk of {self.actor_len} "
                             "actions (critic.partial_len with DQC, else critic.chunk_len)")
        N, A = env.num_envs, env.action_dim
        self.actor_optimizer = self._optimizer(self.actor.parameters(), cfg.actor_lr)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.executor = ChunkExecutor(N, self.actor_len, A, cfg.execution, cfg.execute_len or None, cfg.ensemble_decay,
                                      self.device)
        # AC3's success-only actor: per buffer row, the episode it belongs to and whether that episode succeeded.
        self.episode_id = torch.zeros(self.buffer.capacity, N, dtype=torch.long, device=self.device)
        self.succeeded = torch.zeros(self.buffer.capacity, N, dtype=torch.bool, device=self.device)
        self.current_episode = torch.zeros(N, dtype=torch.long, device=self.device)
        self.bc_prior: ChunkedActor | None = None
        """``bc_anchor=clone``: the frozen clone (normalised obs ``[B, D]`` -> ``[B, l, A]``); not checkpointed."""
        if cfg.bc_checkpoint:
            self._load_bc(cfg.bc_checkpoint)
            if cfg.bc_anchor == "clone":
                self.bc_prior = copy.deepcopy(self.actor).requires_grad_(False).eval()
        if cfg.demos:
            self.use_demos(cfg.demos, cfg.demo_fraction, cfg.only_success_demos, prime=not cfg.bc_checkpoint)

    def _load_bc(self, path: str) -> None:
        """Copy a ``robot-rl bc`` run's actor (into the actor and its target) and normaliser (then frozen)."""
        bc, cfg = load_clone(path, self.env.observation_dims["policy"], self.env.action_dim), self.cfg
        kinds = ("chunked", "deterministic") if self.actor_len == 1 else ("chunked",)
        if bc.cfg.actor not in kinds or bc.cfg.chunk_len != self.actor_len \
                or list(bc.cfg.actor_hidden_dims) != list(cfg.actor_hidden_dims) or bc.cfg.activation != cfg.activation:
            want = "--actor chunked --chunk-len" if self.actor_len > 1 else "--actor deterministic, chunk"
            raise ValueError(
                f"agent.bc_checkpoint={path} holds a {bc.cfg.actor} actor of {bc.cfg.chunk_len} action(s) "
                f"{bc.cfg.actor_hidden_dims}/{bc.cfg.activation}; this agent's actor plays {self.actor_len} action(s) "
                f"{list(cfg.actor_hidden_dims)}/{cfg.activation}: `robot-rl bc <dataset> {want} {self.actor_len} "
                "--hidden-dims ...`"
            )
        self.actor.net.load_state_dict(bc.actor.net.state_dict())  # DeterministicActor = ChunkedActor with h = 1
        self.actor_target.load_state_dict(self.actor.state_dict())
        start_from_clone(self.normalizers, bc.normalizer)

    # --- the template's hooks: critic, actor, acting ---------------------------------------------

    @property
    def actor_len(self) -> int:
        """Actions the actor outputs: ``h``, or DQC's ``l``; the critic's :attr:`ChunkedCritic.actor_len`."""
        return self.critic.actor_len

    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """A :class:`ChunkedActor` of ``l`` actions."""
        return ChunkedActor(obs_dim, action_dim, self.actor_len, list(self.cfg.actor_hidden_dims),
                            self.cfg.activation).to(self.device)

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """Noisy actor chunks ``[n, l, A]`` for normalised policy obs ``[n, D]``."""
        chunk = self.actor(obs)
        return (chunk + torch.randn_like(chunk) * self.cfg.exploration_noise).clamp(-1.0, 1.0)

    def random_action(self, obs: torch.Tensor) -> torch.Tensor:
        """Uniform warm-up chunks ``[n, l, A]``."""
        return torch.rand(obs.shape[0], self.actor_len, self.env.action_dim, device=self.device) * 2 - 1

    def execute(self, obs: torch.Tensor, source: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The executor's next action ``[N, A]``, querying ``source`` for the envs that need a new chunk."""
        return self.executor.act(obs, source)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The first action ``[B, A]`` of the actor's chunk."""
        return self.actor(obs)[:, 0]

    @torch.no_grad()
    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """Members ``[E, N, G]`` of the value of the chunk the actor plans at raw ``obs`` (whose first action is the
        executed ``action``): ``Q``, or DQC's partial ``Q_P``."""
        groups = self.normalize(obs)
        return self.critic.actor_estimates(groups[self.critic_group], self.actor(groups["policy"]))

    def on_step(self, obs: Obs, step: Any, done: torch.Tensor) -> None:
        """Done envs drop their plans; with ``success_only_actor`` the row about to be stored is labelled."""
        if self.cfg.success_only_actor:
            self._track_success(done, step.info)
        self.executor.reset(done)

    def _track_success(self, done: torch.Tensor, info: dict) -> None:
        """Label the row about to be written with its episode; mark every stored row of episodes that end in
        success now (``done`` ``[N]``)."""
        if "success" not in info:
            raise ValueError("agent.success_only_actor needs a task that reports info['success']; "
                             "set agent.success_only_actor=false for this task")
        row = self.buffer.position
        self.episode_id[row] = self.current_episode
        self.succeeded[row] = False
        hit = done & info["success"].to(self.device)
        if bool(hit.any()):
            cols = hit.nonzero().squeeze(-1)
            self.succeeded[:, cols] |= self.episode_id[:, cols] == self.current_episode[cols]
        self.current_episode += done.long()

    # --- learning ------------------------------------------------------------------------------

    def draw(self, buffer: ReplayBuffer, n: int) -> ChunkBatch:
        """``n`` chunks of ``h`` steps of ``buffer`` with their chunk returns (``critic.on_truncation``); the template
        mixes the demo chunks in first (:meth:`demo_rows`)."""
        return buffer.sample_chunks(n, self.critic.chunk_len, self.cfg.gamma, self.critic.on_truncation)

    def policy_value(self, obs: Obs, target: bool = False) -> torch.Tensor:
        """``[B, G]`` value of the actor's chunk at normalised ``obs`` (groups ``[B, dim]``): the long critic's
        ``Q(s, pi(s))``, or DQC's partial critic ``Q_P(s, pi(s))``. ``target``: target actor with TD3's clipped
        smoothing noise and target critic reduced by ``target_reduce``; else the online ones by ``actor_reduce``."""
        cfg = self.cfg
        chunk = (self.actor_target if target else self.actor)(obs["policy"])
        if target:
            noise = (torch.randn_like(chunk) * cfg.target_policy_noise).clamp(-cfg.target_noise_clip,
                                                                             cfg.target_noise_clip)
            chunk = (chunk + noise).clamp(-1.0, 1.0)
        critic = self.critic.target_critic() if target else self.critic
        reduce = cfg.target_reduce if target else cfg.actor_reduce
        return reduce_members(critic.actor_estimates(obs[self.critic_group], chunk), reduce, self.critic.subset)

    @torch.no_grad()
    def critic_target(self, batch: ChunkBatch, n_demo: int = 0) -> torch.Tensor:
        """``[B, G]`` TD target of the sampled chunks: the chunk return plus its bootstrap, or with
        ``intra_chunk_returns`` the mean of the intra-chunk ``k``-step targets over executed prefixes.
        The first ``n_demo`` rows are chunks of the demo partition."""
        if not self.cfg.intra_chunk_returns:
            next_v = self.policy_value(batch.next_obs, target=True)
            return batch.target.returns[:, None] + batch.target.discount[:, None] * next_v
        B, h = batch.rewards.shape
        parts = [(self.buffer, slice(n_demo, B))]
        if n_demo:
            parts.insert(0, (self.demo_source.buffer, slice(0, n_demo)))
        stored = [buf.next_obs_at(batch.rows[i], batch.env[i]) for buf, i in parts]  # groups [n, h, dim] per part
        step_next = self.normalize({g: torch.cat([part[g].flatten(0, 1) for part in stored])
                                    for g in self.buffer.observation_dims})
        boot = self.policy_value(step_next, target=True).float().reshape(B, h, -1)  # [B, h, G]
        G = boot.shape[-1]
        targets, executed = intra_chunk_returns(
            batch.rewards.repeat_interleave(G, 0), batch.terminated.repeat_interleave(G, 0),
            batch.truncated.repeat_interleave(G, 0), boot.permute(0, 2, 1).reshape(B * G, h), self.cfg.gamma)
        weight = executed.float()
        return ((targets * weight).sum(1) / weight.sum(1)).reshape(B, G)

    def learn(self, batch: ChunkBatch, n_demo: int | None = None) -> Metrics:
        """Critic regression on valid chunks; every ``policy_delay`` updates the actor and targets.
        The first ``n_demo`` rows of ``batch`` are demo chunks (None: :meth:`demo_rows` of the batch, as
        :meth:`sample_batch` draws them)."""
        cfg, valid = self.cfg, batch.target.valid
        n_demo = self.demo_rows(batch.rewards.shape[0]) if n_demo is None else n_demo
        target = self.critic_target(batch, n_demo)
        critic_obs = batch.obs[self.critic_group]
        metrics: Metrics = {"train/valid_chunks": valid.float().mean()}
        if bool(valid.any()):
            loss, critic_metrics = self.critic.loss(critic_obs[valid], batch.actions[valid], target[valid])
            self.critic_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.critic_optimizer.step()
            metrics.update({f"loss/{k}": v for k, v in critic_metrics.items()})
        if self.updates % cfg.policy_delay == 0 and self.updates >= cfg.critic_warmup_updates:
            metrics.update(self._actor_step(batch, n_demo))
        if self.updates % cfg.policy_delay == 0:
            self.critic.update_target(cfg.tau)
            self.polyak(self.actor_target, self.actor, cfg.tau)
        return metrics

    def _actor_step(self, batch: ChunkBatch, n_demo: int) -> Metrics:
        """One actor step: maximise the critic (AC3: on states of successful episodes) plus the BC term."""
        cfg, metrics, states = self.cfg, {}, batch.obs
        if cfg.success_only_actor:
            online = self.succeeded[batch.rows[n_demo:, 0], batch.env[n_demo:]]
            keep = torch.cat([torch.ones(n_demo, dtype=torch.bool, device=self.device), online])
            metrics["train/success_states"] = keep.float().mean()
            states = {g: v[keep] for g, v in batch.obs.items()}
        if states["policy"].shape[0] == 0:
            return metrics
        self.critic.requires_grad_(False)
        actor_loss = -self.policy_value(states).mean()
        bc = None
        if cfg.bc_weight > 0 and self.bc_prior is not None:
            bc = self.clone_loss(states["policy"])
        elif cfg.bc_weight > 0 and n_demo:
            bc = self.bc_loss(batch, n_demo)
        if bc is not None:
            metrics["loss/bc"] = bc.detach()
            actor_loss = actor_loss + cfg.bc_weight * bc
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.critic.requires_grad_(True)
        metrics["loss/actor"] = actor_loss.detach()
        return metrics

    def bc_loss(self, batch: ChunkBatch, n_demo: int) -> torch.Tensor:
        """Mean over the first ``n_demo`` (demo) chunks of ``||pi(s)_k - a_demo_k||^2`` summed over actions and
        averaged over the chunk's executed steps ``k`` (the actor's ``l <= h`` of them with DQC)."""
        chunk = self.actor(batch.obs["policy"][:n_demo])  # [n, l, A]
        length = chunk.shape[1]
        executed = (torch.arange(length, device=self.device)[None, :] <= batch.target.last[:n_demo, None]).float()
        error = (chunk - batch.actions[:n_demo, :length]).pow(2).sum(-1)  # [n, l]
        return ((error * executed).sum(1) / executed.sum(1)).mean()

    def clone_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """Mean over the normalised policy ``obs`` ``[B, D]`` of ``||pi(s)_k - clone(s)_k||^2`` summed over actions
        and averaged over the chunk's ``l`` steps (``bc_anchor=clone``)."""
        if self.bc_prior is None:
            raise RuntimeError("clone_loss needs the frozen clone: agent.bc_checkpoint=<dir> agent.bc_anchor=clone")
        with torch.no_grad():
            anchor = self.bc_prior(obs)  # [B, l, A]
        return (self.actor(obs) - anchor).pow(2).sum(-1).mean()

    # --- persistence and export ----------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The template's networks plus the target actor."""
        return {**super().networks(), "actor_target": self.actor_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Critic and actor optimisers."""
        return {**super().optimizers(), "actor_optimizer": self.actor_optimizer}

    def state_dict(self) -> dict[str, Any]:
        """The template's state plus AC3's episode labels (with the buffer)."""
        state = super().state_dict()
        if self.cfg.checkpoint_buffer:
            state["episodes"] = {"id": self.episode_id, "succeeded": self.succeeded, "current": self.current_episode}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; plans in flight are dropped. AC3's episode labels come back only with the
        buffer rows they label (a run opened with another env count to evaluate or export drops both)."""
        super().load_state_dict(state)
        if "episodes" in state and "buffer" in state:
            self.episode_id.copy_(state["episodes"]["id"])
            self.succeeded.copy_(state["episodes"]["succeeded"])
            self.current_episode.copy_(state["episodes"]["current"])
        self.executor.reset(torch.ones(self.env.num_envs, dtype=torch.bool, device=self.device))

    def export_actor(self) -> nn.Module:
        """The actor's chunk flattened ``[B, l*A]`` (step-major), played by :meth:`policy_chunking`'s execution."""
        return FlatChunk(copy.deepcopy(self.actor))

    def policy_chunking(self) -> tuple[int, ChunkExecution]:
        """``(l, execution)``: :meth:`policy` outputs ``l`` actions per query, played as collection plays them."""
        ex = self.executor
        return self.actor_len, ChunkExecution(ex.mode, ex.execute_len, ex.decay)
