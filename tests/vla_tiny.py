"""The tiny agent=vla run of tests/test_vla_image_size.py and tests/test_vla_export_run.py, and its dataset: a
recorded LeRobot dataset copied with its front camera's frames stretched to another (non-square) size, a real v3
dataset written by our writer and video-encoded again, standing for a user's camera of another shape
(``agent.image_size``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter
from robot_rl.data.lerobot.features import DEFAULT_FEATURES
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.deploy.vla_runtime import resize_nearest

FRONT = "observation.images.front"
TINY_VLA = ["agent=vla", "task=so101_reach_lang", "task.env.cameras=[front]", "task.env.image_size=32",
            "task.env.camera_obs=false", "+task.env.episode_s=1.0", "task.num_envs=2", "agent.cameras=[front]",
            "agent.chunk_len=4", "agent.execute_len=2", "agent.batch_size=8", "agent.warmup_updates=0",
            "eval_episodes=0", "sim.num_threads=1", "logger=none"]
"""Overrides of a few-update so101_reach_lang SFT run on the front camera at 32x32 (add ``agent.dataset``,
``agent.updates`` and ``export_formats``)."""


def stretched_copy(src: Path, dst: Path, height: int, width: int) -> Path:
    """``src`` with every front frame stretched to ``height x width`` (nearest pixel), the rest as recorded."""
    ds = LeRobotDataset(src)
    features = {k: dataclasses.replace(f, shape=(height, width, 3)) if k == FRONT else f
                for k, f in ds.features.items() if k not in DEFAULT_FEATURES}
    with LeRobotWriter.create(dst, ds.fps, features, robot_type="so101") as writer:
        for e in range(ds.num_episodes):
            columns = ds.episode(e)
            frames = resize_nearest(ds.episode_frames(e, FRONT).transpose(0, 3, 1, 2), height, width)
            for t in range(len(frames)):
                frame = {k: columns[k][t] for k in features if k != FRONT}
                writer.add_frame({**frame, FRONT: frames[t].transpose(1, 2, 0)}, task=ds.episode_task(e))
            writer.save_episode()
    return dst


def record_wide(root: Path) -> Path:
    """3 scripted so101_reach_lang episodes of 1 s with the front camera at 32x32 (``root/demos``), stretched to a
    48x80 camera (``root/wide``, returned)."""
    record("so101_reach_lang", expert_policy, root / "demos", 3, None, num_envs=3, seed=0,
           overrides={"episode_s": 1.0, "cameras": ["front"], "image_size": 32})
    return stretched_copy(root / "demos", root / "wide", 48, 80)
