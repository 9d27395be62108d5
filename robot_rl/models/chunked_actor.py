"""Actors that output action chunks, and their execution: open loop or temporal ensembling.

:class:`ChunkedActor` maps an observation ``[B, D]`` to ``h`` actions ``[B, h, A]`` in ``[-1, 1]``
(the actor of chunked critics, :mod:`robot_rl.critics.chunked`).

:class:`ChunkExecutor` turns chunks into one action per control step for ``N`` envs, on the device. It is
the batched torch port of the numpy reference :class:`robot_rl.deploy.chunking.ChunkExecutor` (the one
convention, used by the artifact evaluation and the ROS node; read its module docstring for the modes and
ACT's weights ``w_i = exp(-ensemble_decay * i)``, ``i = 0`` the oldest prediction), tested equal to it step
by step. :class:`ChunkPlayer` plays a flat chunk policy ``[B, D] -> [B, h*A]`` through it for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.deploy.chunking import CHUNK_MODES, check_execution
from robot_rl.models.mlp import fp32_head, mlp

MODES = CHUNK_MODES


class ChunkedActor(nn.Module):
    """``a_{t:t+h} = tanh(mlp(obs))``: normalised obs ``[B, D]`` -> chunk ``[B, h, A]`` in ``[-1, 1]`` (output layer
    in float32 under a bf16 autocast)."""

    def __init__(self, obs_dim: int, action_dim: int, chunk_len: int, hidden_dims: list[int], act: str = "relu"):
        super().__init__()
        if chunk_len < 1:
            raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
        self.chunk_len, self.action_dim = chunk_len, action_dim
        self.net = mlp(obs_dim, hidden_dims, chunk_len * action_dim, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Chunk ``[B, h, A]``."""
        return torch.tanh(fp32_head(self.net, obs)).reshape(obs.shape[0], self.chunk_len, self.action_dim)


class FlatChunk(nn.Module):
    """A :class:`ChunkedActor` with its chunk flattened (the exported form): ``[B, D]`` -> ``[B, h*A]``, step-major."""

    def __init__(self, actor: ChunkedActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Chunk ``[B, h*A]``: action ``k`` is ``[:, k*A:(k+1)*A]``."""
        return self.actor(obs).flatten(1)


class ChunkExecutor:
    """Per-env execution state of chunked policies (the torch port of :class:`robot_rl.deploy.chunking.ChunkExecutor`).

    Args:
        num_envs: ``N``.
        chunk_len: ``h`` actions per chunk.
        action_dim: ``A``.
        mode: ``open_loop`` or ``temporal_ensemble``.
        execute_len: open loop only: actions played per query, ``1..h`` (None: ``h``).
        ensemble_decay: temporal ensembling's ``m >= 0`` in ``w_i = exp(-m i)``, ``i = 0`` the oldest
            prediction (older predictions weigh more; 0 = plain mean).
    """

    def __init__(
        self,
        num_envs: int,
        chunk_len: int,
        action_dim: int,
        mode: str = "open_loop",
        execute_len: int | None = None,
        ensemble_decay: float = 0.01,
        device: str | torch.device = "cpu",
    ) -> None:
        execute_len = chunk_len if execute_len is None else execute_len
        check_execution(chunk_len, mode, execute_len, ensemble_decay)
        self.mode, self.h, self.execute_len, self.decay = mode, chunk_len, execute_len, float(ensemble_decay)
        self.device = torch.device(device)
        self.ages = torch.arange(chunk_len, device=self.device)
        # plans[n, k] is the chunk env n queried k steps ago ([h, A]); open loop keeps only its current one (k = 0)
        kept = chunk_len if mode == "temporal_ensemble" else 1
        self.plans = torch.zeros(num_envs, kept, chunk_len, action_dim, device=self.device)
        self.valid = torch.zeros(num_envs, chunk_len, dtype=torch.bool, device=self.device)
        self.index = torch.full((num_envs,), execute_len, dtype=torch.long, device=self.device)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of envs where ``done`` ``[N]`` bool is set."""
        self.valid[done] = False
        self.index[done] = self.execute_len

    def needs_query(self) -> torch.Tensor:
        """``[N]`` bool: envs whose next action needs a new chunk."""
        if self.mode == "temporal_ensemble":
            return torch.ones_like(self.index, dtype=torch.bool)
        return self.index >= self.execute_len

    @torch.no_grad()
    def step(self, chunks: torch.Tensor) -> torch.Tensor:
        """The action ``[N, A]`` of this step, given fresh ``chunks`` ``[n, h, A]`` for the rows of
        :meth:`needs_query` (in order)."""
        query = self.needs_query()
        if self.mode == "open_loop":
            if bool(query.any()):
                self.plans[query, 0] = chunks.to(self.plans.dtype)
                self.index[query] = 0
            rows = torch.arange(self.index.shape[0], device=self.device)
            action = self.plans[rows, 0, self.index]
            self.index += 1
            return action
        self.plans = torch.roll(self.plans, 1, dims=1)  # every plan ages one step; the oldest (age h) is replaced
        self.valid = torch.roll(self.valid, 1, dims=1)
        self.plans[:, 0], self.valid[:, 0] = chunks.to(self.plans.dtype), True
        preds = self.plans[:, self.ages, self.ages]  # [N, h, A]: chunk_{t-k}[k]
        oldest = torch.where(self.valid, self.ages, -1).amax(dim=1, keepdim=True)  # K per env
        weights = torch.exp(-self.decay * (oldest - self.ages).clamp_min(0)) * self.valid  # [N, h], oldest 1
        return (weights[..., None] * preds).sum(1) / weights.sum(1, keepdim=True)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, actor: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The action ``[N, A]`` for this step; calls ``actor(obs[rows]) -> [n, h, A]`` for the envs that need it
        (none: no call)."""
        query = self.needs_query()
        if bool(query.all()):
            return self.step(actor(obs))
        chunks = actor(obs[query]) if bool(query.any()) else self.plans[:0, 0]
        return self.step(chunks)


class ChunkPlayer:
    """A flat chunk policy ``[B, D] -> [B, h*A]`` played one action ``[N, A]`` per step (for
    :func:`robot_rl.train.evaluation.evaluate`, which calls :meth:`reset` with the envs that finished).

    Args:
        policy: raw obs ``[B, D]`` -> ``h`` actions ``[B, h*A]``, step-major.
        chunk_len: ``h``.
        action_dim: ``A``.
        execution: how chunks are played (mode, execute_len, ensemble_decay).
    """

    def __init__(self, policy: Callable[[torch.Tensor], torch.Tensor], chunk_len: int, action_dim: int,
                 execution: ChunkExecution) -> None:
        self.policy, self.h, self.action_dim, self.execution = policy, chunk_len, action_dim, execution
        self.executor: ChunkExecutor | None = None
        self.queries = 0
        """Chunks inferred so far (rows), for tests and diagnostics."""

    def _chunks(self, obs: torch.Tensor) -> torch.Tensor:
        self.queries += obs.shape[0]
        return self.policy(obs).reshape(obs.shape[0], self.h, self.action_dim)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Action ``[N, A]`` for raw obs ``[N, D]`` (the executor is made for ``N`` on the first call)."""
        if self.executor is None:
            ex = self.execution
            self.executor = ChunkExecutor(obs.shape[0], self.h, self.action_dim, ex.mode, ex.execute_len,
                                          ex.ensemble_decay, obs.device)
        return self.executor.act(obs, self._chunks)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done)
