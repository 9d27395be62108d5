"""Behaviour cloning as an offline agent on the off-policy template (``agent=bc``, driven by ``robot-rl bc``).

The replay is the demonstrations: a :class:`~robot_rl.data.demo_source.DemoSource` of a ``robot-rl record``
dataset replaces the template's online buffer, split into training and validation episodes (whole episodes
held out, ``val_fraction``). :meth:`BC.learn` is the cloning loss; the template gives the rest: observation
normalisation (primed with the demo observations, never updated afterwards), ``agent.amp``, the fused optimiser,
``state_dict`` / ``load_state_dict`` (the normal agent checkpoint) and ``policy()`` for export.

Three actor kinds (``agent.actor``), the networks the online agents use, so a clone can start RL
(``agent.bc_checkpoint`` of ``agent=rlpd`` / ``agent=chunked_td3``, read with :func:`load_clone`):

- ``gaussian``: SAC's tanh-squashed Gaussian (:class:`~robot_rl.agents.off_policy.SquashedGaussianActor`),
  trained on the MSE of its mean action plus ``nll_weight`` x the negative log-likelihood of the demo action
  (so its std is fitted too and SAC does not start from a random exploration width);
- ``deterministic``: TD3's ``tanh(mlp(obs))`` (:class:`~robot_rl.agents.off_policy.DeterministicActor`), MSE;
- ``chunked``: :class:`~robot_rl.models.chunked_actor.ChunkedActor`, ``h = chunk_len`` future actions per
  observation; chunk steps past the episode end are left out of the loss, as ACT does. Exported and evaluated
  as its whole chunk played open loop; acting in ``robot-rl train`` it replans every step (the chunk's first action).

One :meth:`BC.update` is one epoch: a pass over the shuffled training frames in
``ceil(train frames / batch_size)`` gradient updates, then the validation MSE (``val/mse``, on the held-out
episodes, else the training ones).
The template's TD settings (``gamma``, ``tau``, ``n_step``, ``critic_lr``, ``utd_ratio``, ...) are unused: BC
trains no critic. The template builds one all the same (``critic=single`` in ``configs/agent/bc.yaml``, the
smallest Q critic); the checkpoint carries it untrained.

Shapes: ``n`` demo frames, ``B`` batch, ``D`` policy obs, ``A`` actions, ``h`` chunk length.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, Obs, register_agent
from robot_rl.agents.off_policy import (
    DeterministicActor,
    Metrics,
    OffPolicyAgent,
    OffPolicyConfig,
    SquashedGaussianActor,
)
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint
from robot_rl.config.checks import check, fail
from robot_rl.config.io import load_train_config
from robot_rl.data.demo_source import DemoSource, demo_groups
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.models.chunked_actor import ChunkedActor, FlatChunk
from robot_rl.models.mlp import fp32_head
from robot_rl.models.normalizer import EmpiricalNormalizer

ACTOR_KINDS = ("gaussian", "deterministic", "chunked")


@dataclass
class BCConfig(OffPolicyConfig):
    """``agent=bc``: the template's settings (``batch_size``, ``actor_lr``, ``weight_decay``, ``actor_hidden_dims``,
    ``activation``, ``amp``) plus the cloning ones.

    Attributes:
        demos: a ``robot-rl record`` dataset directory (required to build the agent).
        actor: ``gaussian`` (SAC's actor), ``deterministic`` (TD3's) or ``chunked``.
        chunk_len: actions per prediction (``chunked`` only; ``h``).
        val_fraction: share of episodes held out for validation (at least one when there are two, never all;
            0 = none).
        split_seed: which episodes are held out.
        nll_weight: ``gaussian`` only, weight of the demo actions' negative log-likelihood per dim.
        only_success_demos: clone only the episodes that succeeded.
    """

    demos: str | None = None
    actor: str = "gaussian"
    chunk_len: int = 1
    nll_weight: float = 0.01
    only_success_demos: bool = False
    val_fraction: float = 0.1
    split_seed: int = 0
    # the template's settings with BC's defaults (offline: no online replay, no warm-up, no critic ensemble)
    actor_lr: float = 1e-3
    weight_decay: float = 1e-4
    normalize_obs: bool = True
    buffer_size: int = 1
    learning_starts: int = 0
    target_reduce: str = "mean"
    checkpoint_buffer: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "agent", non_negative=("nll_weight",), at_least_1=("chunk_len",), at_least_0=("split_seed",),
              choices={"actor": ACTOR_KINDS})
        if self.actor != "chunked" and self.chunk_len != 1:
            raise fail(self, "agent", "chunk_len", f"must be 1 for actor={self.actor}",
                       "1, or use agent.actor=chunked")
        if not 0.0 <= self.val_fraction < 1.0:
            raise fail(self, "agent", "val_fraction", "must be in [0, 1)", "a share of episodes in [0, 1)")
        if not self.normalize_obs:
            raise fail(self, "agent", "normalize_obs", "must be true for bc",
                       "true (the clone learns on observations normalised with the demos' statistics)")


def build_actor(cfg: BCConfig, obs_dim: int, action_dim: int) -> nn.Module:
    """The untrained actor of ``cfg.actor``: normalised obs ``[B, D]`` -> ``[B, A]`` (chunked ``[B, h, A]``)."""
    hidden = list(cfg.actor_hidden_dims)
    if cfg.actor == "gaussian":
        return SquashedGaussianActor(obs_dim, action_dim, hidden, cfg.activation)
    if cfg.actor == "deterministic":
        return DeterministicActor(obs_dim, action_dim, hidden, cfg.activation)
    return ChunkedActor(obs_dim, action_dim, cfg.chunk_len, hidden, cfg.activation)


def predict_chunk(actor: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """Deterministic prediction ``[B, h, A]`` (``h = 1`` for one-step actors) for normalised ``obs`` ``[B, D]``."""
    out = actor(obs)
    return out if out.dim() == 3 else out.unsqueeze(1)


@dataclass
class BCBatch:
    """Demo frames to clone: normalised ``obs`` ``[B, D]``, ``actions`` ``[B, h, A]`` in ``[-1, 1]`` (frame ``t``'s
    action and the ``h - 1`` after it) and ``mask`` ``[B, h]`` (False past the episode end)."""

    obs: torch.Tensor
    actions: torch.Tensor
    mask: torch.Tensor


@register_agent("bc", BCConfig)
class BC(OffPolicyAgent):
    """Offline behaviour cloning: the replay is the demonstrations, :meth:`learn` the cloning loss."""

    cfg: BCConfig

    def __init__(self, cfg: BCConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        if not cfg.demos:
            raise ValueError("agent=bc needs demonstrations: agent.demos=<dataset dir> "
                             "(record one with `robot-rl record --task <task> --out <dir>`)")
        dims = demo_groups(cfg.demos, env.observation_dims, "bc", critic_obs="policy")
        super().__init__(cfg, critic_cfg, dataclasses.replace(env, observation_dims=dims), device)
        self.actor_optimizer = self._optimizer(self.actor.parameters(), cfg.actor_lr)
        self.demo_source = DemoSource(cfg.demos, dims, env.action_dim, self.from_env_action, 1.0,
                                      cfg.only_success_demos, self.device)
        self.buffer = self.demo_source.buffer  # the replay is the demos: one env, episodes back to back
        self.demo_source.prime(self.normalizers)
        n = len(self.buffer)
        done = (self.buffer.terminated | self.buffer.truncated)[:n, 0].long()
        self.episode = torch.cumsum(done, 0) - done
        """``[n]`` episode of every demo frame (0, 1, ... in buffer order)."""
        self.train_rows, self.val_rows = self.split(cfg.val_fraction, cfg.split_seed)
        self.epoch_batches: list[torch.Tensor] = []
        """Row indices ``[<= B]`` of the current epoch's batches not yet learned from (the next one last)."""

    def split(self, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices (train ``[n_t]``, val ``[n_v]``) holding out ``round(val_fraction * E)`` whole episodes (at
        least one, and at most ``E - 1``, of two or more; none when ``val_fraction`` is 0), chosen by ``seed``."""
        episodes = int(self.episode[-1]) + 1
        n_val = 0 if val_fraction == 0 or episodes < 2 else min(max(1, round(val_fraction * episodes)), episodes - 1)
        held = torch.as_tensor(np.random.default_rng(seed).permutation(episodes)[:n_val], device=self.device)
        val = torch.isin(self.episode, held)
        return torch.nonzero(~val).squeeze(1), torch.nonzero(val).squeeze(1)

    # --- the template's hooks ----------------------------------------------------------------

    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """The actor of ``agent.actor`` (:func:`build_actor`)."""
        return build_actor(self.cfg, obs_dim, action_dim).to(self.device)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The clone's action ``[B, A]`` (a chunk's first) for normalised policy obs ``[B, D]``."""
        return predict_chunk(self.actor, obs)[:, 0]

    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """BC does not explore: the clone's action ``[N, A]``."""
        return self.deterministic_action(obs)

    def demo_chunks(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions [B, h, A], mask [B, h])`` of demo frames ``rows`` ``[B]``: step ``k`` is frame ``rows + k``'s
        action, masked out (and clamped to the last frame) past the end of its episode."""
        n = len(self.buffer)
        idx = rows[:, None] + torch.arange(self.cfg.chunk_len, device=self.device)  # [B, h]
        inside = idx < n
        idx = idx.clamp_max(n - 1)
        mask = inside & (self.episode[idx] == self.episode[rows][:, None])
        return self.buffer.action[idx, 0], mask

    def batch(self, rows: torch.Tensor) -> BCBatch:
        """The demo frames ``rows`` ``[B]`` as a :class:`BCBatch`."""
        actions, mask = self.demo_chunks(rows)
        return BCBatch(self.normalizers["policy"](self.buffer.obs["policy"][rows, 0]), actions, mask)

    def sample_batch(self) -> BCBatch:
        """The next ``batch_size`` (the epoch's last: fewer) frames of the epoch's shuffled training frames."""
        return self.batch(self.epoch_batches.pop())

    def loss(self, batch: BCBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, mse)``: masked action MSE (plus the Gaussian NLL term of the first action) on ``batch``."""
        weights = batch.mask.float().unsqueeze(-1)  # [B, h, 1]
        denom = weights.sum().clamp_min(1.0) * batch.actions.shape[-1]
        mse = ((predict_chunk(self.actor, batch.obs) - batch.actions).pow(2) * weights).sum() / denom
        if self.cfg.actor != "gaussian" or self.cfg.nll_weight == 0:
            return mse, mse
        actor: SquashedGaussianActor = self.actor
        mean, log_std = fp32_head(actor.net, batch.obs).chunk(2, dim=-1)
        log_std = log_std.clamp(actor.LOG_STD_MIN, actor.LOG_STD_MAX)
        u = torch.atanh(batch.actions[:, 0].clamp(-0.999, 0.999))
        nll = 0.5 * ((u - mean) / log_std.exp()).pow(2) + log_std + 0.5 * math.log(2 * math.pi)
        return mse + self.cfg.nll_weight * nll.mean(), mse

    def learn(self, batch: BCBatch) -> Metrics:
        """One AdamW step on the cloning loss."""
        loss, mse = self.loss(batch)
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_optimizer.step()
        return {"loss/bc": loss.detach(), "loss/bc_mse": mse.detach()}

    @torch.no_grad()
    def validation_mse(self) -> torch.Tensor:
        """Action MSE (0-d) on the held-out episodes (the training frames when none is held out)."""
        rows = self.val_rows if len(self.val_rows) else self.train_rows
        with self.autocast():
            return self.loss(self.batch(rows))[1].float()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The template's (critic) optimiser and the actor's."""
        return {**super().optimizers(), "actor_optimizer": self.actor_optimizer}

    def export_actor(self) -> nn.Module:
        """The actor; a chunked one with its chunk flattened ``[B, h*A]``."""
        return FlatChunk(copy.deepcopy(self.actor)) if isinstance(self.actor, ChunkedActor) else super().export_actor()

    def policy_chunking(self) -> tuple[int, ChunkExecution]:
        """A chunked clone outputs its ``h`` actions per query, played open loop; else one action."""
        h = self.cfg.chunk_len
        return h, ChunkExecution("open_loop", h, 0.0)

    # --- offline: the Agent interface without learning from the env ----------------------------

    def observe(self, obs: Obs, action: torch.Tensor, step: Any) -> None:
        """Count the env's transitions (when ``robot-rl train`` rolls the clone out); BC learns from demos only."""
        self.env_steps += self.env.num_envs

    def ready(self) -> bool:
        """Always: the demonstrations are all there."""
        return True

    def update(self) -> Metrics:
        """One epoch, a pass over the shuffled training frames (``ceil(train frames / batch_size)`` gradient updates,
        metrics averaged), and the validation MSE ``val/mse``."""
        order = self.train_rows[torch.randperm(len(self.train_rows), device=self.device)]
        self.epoch_batches = list(order.split(self.cfg.batch_size))[::-1]
        self.update_credit += len(self.epoch_batches)
        metrics = super().update()
        metrics["val/mse"] = self.validation_mse()
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The template's state without the replay (the demos), plus the demos' path and size."""
        state = super().state_dict()
        state.pop("buffer", None)
        return {**state, "demos": self.demo_source.state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the demos must still hold the same number of frames."""
        self.demo_source.check_resume(state.get("demos"))
        super().load_state_dict(state)


@dataclass
class Clone:
    """A ``robot-rl bc`` run read back for ``agent.bc_checkpoint``: its config, actor (normalised obs ``[B, D]`` ->
    ``[B, A]`` or ``[B, h, A]``) and policy observation normaliser."""

    cfg: BCConfig
    actor: nn.Module
    normalizer: EmpiricalNormalizer


def load_clone(path: str | Path, obs_dim: int, action_dim: int) -> Clone:
    """The newest checkpoint of the ``robot-rl bc`` run directory ``path`` (``config.yaml`` + ``checkpoints/``) for
    policy obs ``[B, obs_dim]`` and ``action_dim`` actions; ``ValueError`` naming ``path`` when it is not one."""
    path = Path(path)
    newest = latest_checkpoint(path)
    if not (path / "config.yaml").is_file() or newest is None:
        raise ValueError(f"agent.bc_checkpoint={path} is not a `robot-rl bc` run (needs config.yaml and "
                         "checkpoints/); create one with `robot-rl bc <dataset> --out <dir>`")
    cfg = load_train_config(path / "config.yaml").agent
    if not isinstance(cfg, BCConfig):
        raise ValueError(f"agent.bc_checkpoint={path} is a run of {type(cfg).__name__}, not of agent=bc; "
                         "create a clone with `robot-rl bc <dataset> --out <dir>`")
    state = load_checkpoint(newest)[1]["agent"]
    actor, normalizer = build_actor(cfg, obs_dim, action_dim), EmpiricalNormalizer(obs_dim)
    try:
        actor.load_state_dict(state["actor"])
        normalizer.load_state_dict({k.removeprefix("policy."): v for k, v in state["normalizers"].items()})
    except RuntimeError as err:
        raise ValueError(f"agent.bc_checkpoint={path} was cloned for other observation or action sizes than this "
                         f"env's {obs_dim} / {action_dim}: {' '.join(str(err).split())[:300]}") from None
    return Clone(cfg, actor.eval(), normalizer)
