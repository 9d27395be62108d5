"""A recorded LeRobot dataset copied with its front camera's frames stretched to another (non-square) size: a real
v3 dataset, written by our writer and video-encoded again, standing for a user's camera of another shape
(``agent.image_size``, tests/test_vla_image_size.py and tests/test_vla_export_run.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter
from robot_rl.data.lerobot.features import DEFAULT_FEATURES
from robot_rl.deploy.vla_runtime import resize_nearest

FRONT = "observation.images.front"


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
