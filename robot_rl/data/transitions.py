"""Recorded demos as RL transitions, e.g. for a separate demo partition of a replay buffer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.lerobot import LeRobotDataset

REQUIRED = (
    "observation.policy",
    "action.policy",
    "next.reward",
    "next.terminated",
    "next.done",
    "next.observation.policy",
)


def demo_transitions(root: str | Path, only_success: bool = False) -> dict[str, np.ndarray]:
    """Every frame of a ``robot-rl record`` dataset as one transition.

    Returns arrays over the N kept frames: ``obs`` float32 ``[N, D]``, ``action`` float32 ``[N, A]``
    (raw, in [-1, 1]), ``reward`` float32 ``[N]``, ``next_obs`` float32 ``[N, D]``, ``terminated``
    bool ``[N]`` (no bootstrap), ``truncated`` bool ``[N]`` (time limit: bootstrap from
    ``next_obs``), ``episode`` int64 ``[N]``. ``only_success`` keeps episodes that succeeded. A NaN or inf in
    those columns is refused (:class:`~robot_rl.data.lerobot.DatasetFormatError` naming file, column, row): no agent
    learns from a non-finite demo.
    """
    ds = LeRobotDataset(root)
    missing = [k for k in REQUIRED if k not in ds.features]
    if missing:
        raise KeyError(f"{root} lacks {missing}; record it with `robot-rl record` (robot_rl >= this version)")
    ds.require_finite("observation.policy", "action.policy", "next.observation.policy", "next.reward")
    keep = np.ones(len(ds), dtype=bool)
    if only_success:
        success = ds.column("next.success")
        episodes = ds.column("episode_index")
        good = {e for e in range(ds.num_episodes) if success[episodes == e].any()}
        keep = np.isin(episodes, list(good))
    terminated = ds.column("next.terminated")
    return {
        "obs": ds.column("observation.policy")[keep].astype(np.float32),
        "action": ds.column("action.policy")[keep].astype(np.float32),
        "reward": ds.column("next.reward")[keep].astype(np.float32),
        "next_obs": ds.column("next.observation.policy")[keep].astype(np.float32),
        "terminated": terminated[keep],
        "truncated": (ds.column("next.done") & ~terminated)[keep],
        "episode": ds.column("episode_index")[keep],
    }
