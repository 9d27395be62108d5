"""Chunk execution, the numpy reference: one action per control step from action chunks ``[H, A]``.

The one convention of the project (training collection, ``robot-rl eval`` of an artifact, the ROS policy
node). :class:`robot_rl.models.chunked_actor.ChunkExecutor` is its batched torch port, tested equal to this
one step by step (tests/test_chunk_executor.py).

Modes, for ``N`` envs (a robot is ``N = 1``):

- ``open_loop``: query the policy every ``execute_len`` steps (``1..H``) and play the first ``execute_len``
  actions of the chunk (``execute_len = H``: Q-chunking's execution; ``l < H``: DQC's).
- ``temporal_ensemble``: query every step; the action of step ``t`` averages every prediction for ``t``
  of the chunks still covering it (ACT, Zhao et al., "Learning Fine-Grained Bimanual Manipulation with
  Low-Cost Hardware", 2023) with ACT's weights::

      w_i = exp(-ensemble_decay * i),   i = 0 the OLDEST prediction, i = 1 the next older, ...

  so older predictions weigh more (``ensemble_decay = 0``: plain mean; larger: new observations come in
  more slowly). The prediction made ``k`` steps ago is ``chunk_{t-k}[k]``; with ``K`` the age of the oldest
  one present, ``i = K - k``. Weights are computed relative to the oldest prediction, so they lie in
  ``(0, 1]`` and never overflow, whatever ``ensemble_decay * H``.

A done env (reset, e-stop, stale state) forgets its plans: its next step queries a fresh chunk.
"""

from __future__ import annotations

import numpy as np

CHUNK_MODES = ("open_loop", "temporal_ensemble")


def check_execution(chunk_len: int, mode: str, execute_len: int, ensemble_decay: float) -> None:
    """Raise ValueError unless ``mode`` is known, ``1 <= execute_len <= chunk_len`` and ``ensemble_decay >= 0``."""
    if mode not in CHUNK_MODES:
        raise ValueError(f"chunk execution mode must be one of {CHUNK_MODES}, got {mode!r}")
    if not 1 <= execute_len <= chunk_len:
        raise ValueError(f"execute_len must be in [1, chunk_len={chunk_len}], got {execute_len}")
    if not ensemble_decay >= 0 or not np.isfinite(ensemble_decay):
        raise ValueError(f"ensemble_decay must be finite and >= 0, got {ensemble_decay}")


class ChunkExecutor:
    """Per-env execution state of chunked policies, numpy float64 (see the module docstring).

    Use: ``rows = ex.needs_query()``; ``action = ex.step(policy(obs[rows]))``.

    Args:
        num_envs: ``N``.
        chunk_len: ``H`` actions per chunk.
        action_dim: ``A``.
        mode: ``open_loop`` or ``temporal_ensemble``.
        execute_len: open loop: actions played per query, ``1..H`` (None: ``H``).
        ensemble_decay: temporal ensembling's ``m >= 0`` in ``w_i = exp(-m i)``, ``i = 0`` the oldest.
    """

    def __init__(self, num_envs: int, chunk_len: int, action_dim: int, mode: str = "open_loop",
                 execute_len: int | None = None, ensemble_decay: float = 0.0) -> None:
        execute_len = chunk_len if execute_len is None else execute_len
        check_execution(chunk_len, mode, execute_len, ensemble_decay)
        self.mode, self.H, self.execute_len, self.decay = mode, chunk_len, execute_len, float(ensemble_decay)
        self.ages = np.arange(chunk_len)
        # plans[n, k] is the chunk env n queried k steps ago ([H, A]); open loop keeps only its current one (k = 0)
        kept = chunk_len if mode == "temporal_ensemble" else 1
        self.plans = np.zeros((num_envs, kept, chunk_len, action_dim))
        self.valid = np.zeros((num_envs, chunk_len), dtype=bool)
        self.index = np.full(num_envs, execute_len)

    def reset(self, done: np.ndarray | None = None) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set (None: all)."""
        done = slice(None) if done is None else np.asarray(done, dtype=bool)
        self.valid[done] = False
        self.index[done] = self.execute_len

    def needs_query(self) -> np.ndarray:
        """``[N]`` bool: the envs whose next :meth:`step` needs a fresh chunk."""
        if self.mode == "temporal_ensemble":
            return np.ones(self.index.shape, dtype=bool)
        return self.index >= self.execute_len

    def steps_to_query(self) -> np.ndarray:
        """``[N]`` int: in how many :meth:`step` calls each env queries a fresh chunk (1: the next one; a reset env
        queries at the next, whatever this says before its reset)."""
        if self.mode == "temporal_ensemble":
            return np.ones(self.index.shape, dtype=np.int64)
        return np.maximum(self.execute_len - self.index, 0) + 1

    def step(self, chunks: np.ndarray) -> np.ndarray:
        """The action ``[N, A]`` of this step, given fresh ``chunks`` ``[n, H, A]`` for the ``n`` rows of
        :meth:`needs_query` (in order; ``n = 0`` allowed)."""
        query = self.needs_query()
        chunks = np.asarray(chunks, dtype=np.float64)
        if chunks.shape != (int(query.sum()), *self.plans.shape[2:]):
            raise ValueError(f"step needs chunks [{int(query.sum())}, {self.H}, {self.plans.shape[3]}] for the "
                             f"envs of needs_query(), got {list(chunks.shape)}")
        if self.mode == "open_loop":
            self.plans[query, 0] = chunks
            self.index[query] = 0
            action = self.plans[np.arange(self.index.size), 0, self.index]
            self.index += 1
            return action
        self.plans[:, 1:] = self.plans[:, :-1]  # every plan ages one step; the oldest (age H) falls off
        self.valid[:, 1:] = self.valid[:, :-1]
        self.plans[:, 0], self.valid[:, 0] = chunks, True
        preds = self.plans[:, self.ages, self.ages]  # [N, H, A]: chunk_{t-k}[k]
        oldest = np.where(self.valid, self.ages, -1).max(axis=1, keepdims=True)  # K per env
        weights = np.where(self.valid, np.exp(-self.decay * np.maximum(oldest - self.ages, 0)), 0.0)  # oldest: 1
        return (weights[..., None] * preds).sum(1) / weights.sum(1, keepdims=True)
