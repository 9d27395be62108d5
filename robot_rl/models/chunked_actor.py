"""Actors that output action chunks, and their execution: open loop or temporal ensembling.

:class:`ChunkedActor` maps an observation ``[B, D]`` to ``h`` actions ``[B, h, A]`` in ``[-1, 1]``
(the actor of chunked critics, :mod:`robot_rl.critics.chunked`).

:class:`ChunkExecutor` turns chunks into one action per control step for ``N`` envs:

- ``open_loop``: query the actor every ``execute_len`` steps and play the first ``execute_len``
  actions of the chunk (``execute_len = h`` is Q-chunking's execution, ``l < h`` DQC's).
- ``temporal_ensemble``: query every step and average every chunk's prediction for the current step
  (ACT, Zhao et al., "Learning Fine-Grained Bimanual Manipulation with Low-Cost Hardware", 2023),
  weighted ``w_i = exp(-m i)`` with ``i = 0`` the *oldest* prediction. Normalised, a prediction made
  ``k`` steps ago weighs ``exp(m k)``, so running weighted sums suffice.

Any env that is done (reset) drops what it had planned.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from robot_rl.models.mlp import mlp

ExecutionMode = Literal["open_loop", "temporal_ensemble"]
MODES = ("open_loop", "temporal_ensemble")


class ChunkedActor(nn.Module):
    """``a_{t:t+h} = tanh(mlp(obs))``: normalised obs ``[B, D]`` -> chunk ``[B, h, A]`` in ``[-1, 1]``."""

    def __init__(self, obs_dim: int, action_dim: int, chunk_len: int, hidden_dims: list[int], act: str = "relu"):
        super().__init__()
        if chunk_len < 1:
            raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
        self.chunk_len, self.action_dim = chunk_len, action_dim
        self.net = mlp(obs_dim, hidden_dims, chunk_len * action_dim, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Chunk ``[B, h, A]``."""
        return torch.tanh(self.net(obs)).reshape(obs.shape[0], self.chunk_len, self.action_dim)


class ChunkExecutor:
    """Per-env execution state of chunked policies (see the module docstring for the modes).

    Args:
        num_envs: ``N``.
        chunk_len: ``h`` actions per chunk.
        action_dim: ``A``.
        mode: ``open_loop`` or ``temporal_ensemble``.
        execute_len: open loop only: actions played per query, ``1..h`` (default ``h``).
        decay: temporal ensembling's ``m >= 0`` (0 = plain average of all predictions).
    """

    def __init__(
        self,
        num_envs: int,
        chunk_len: int,
        action_dim: int,
        mode: ExecutionMode = "open_loop",
        execute_len: int | None = None,
        decay: float = 0.01,
        device: str | torch.device = "cpu",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"chunk execution mode must be one of {MODES}, got {mode!r}")
        execute_len = chunk_len if execute_len is None else execute_len
        if not 1 <= execute_len <= chunk_len:
            raise ValueError(f"execute_len must be in [1, chunk_len={chunk_len}], got {execute_len}")
        if decay < 0:
            raise ValueError(f"temporal ensembling decay must be >= 0, got {decay}")
        self.mode, self.h, self.execute_len = mode, chunk_len, execute_len
        self.device = torch.device(device)
        # Weight of a prediction made k steps ago, k = 0..h-1.
        self.age_weight = torch.tensor([math.exp(decay * k) for k in range(chunk_len)], device=self.device)
        self.chunk = torch.zeros(num_envs, chunk_len, action_dim, device=self.device)
        self.index = torch.full((num_envs,), execute_len, dtype=torch.long, device=self.device)
        self.sums = torch.zeros(num_envs, chunk_len, action_dim, device=self.device)
        self.weights = torch.zeros(num_envs, chunk_len, device=self.device)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of envs where ``done`` ``[N]`` bool is set."""
        self.index[done] = self.execute_len
        self.sums[done] = 0.0
        self.weights[done] = 0.0

    def needs_query(self) -> torch.Tensor:
        """``[N]`` bool: envs whose next action needs a new chunk."""
        if self.mode == "temporal_ensemble":
            return torch.ones_like(self.index, dtype=torch.bool)
        return self.index >= self.execute_len

    @torch.no_grad()
    def act(self, obs: torch.Tensor, actor: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The action ``[N, A]`` for this step; calls ``actor(obs[rows]) -> [n, h, A]`` for envs that need it."""
        query = self.needs_query()
        if self.mode == "open_loop":
            if bool(query.any()):
                self.chunk[query] = actor(obs[query])
                self.index[query] = 0
            rows = torch.arange(self.chunk.shape[0], device=self.device)
            action = self.chunk[rows, self.index]
            self.index += 1
            return action
        new = actor(obs)  # [N, h, A]; slot k of the new chunk is for step t + k, its age there is k
        self.sums += new * self.age_weight[None, :, None]
        self.weights += self.age_weight[None, :]
        action = self.sums[:, 0] / self.weights[:, :1]
        self.sums = torch.cat([self.sums[:, 1:], torch.zeros_like(self.sums[:, :1])], dim=1)
        self.weights = torch.cat([self.weights[:, 1:], torch.zeros_like(self.weights[:, :1])], dim=1)
        return action


class FirstActionOfChunk(nn.Module):
    """Deployable closed-loop view of a chunked actor: ``[B, D] -> [B, A]``, the chunk's first action
    (re-planned every step; the open-loop and ensembled executions need :class:`ChunkExecutor`'s state)."""

    def __init__(self, actor: ChunkedActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """First action ``[B, A]`` of the chunk for ``obs`` ``[B, D]``."""
        return self.actor(obs)[:, 0]
