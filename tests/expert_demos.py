"""Scripted-expert demonstration datasets for tests: real MuJoCo rollouts written as real LeRobot-format files.

    root = record_expert_demos(tmp_path / "reach", "so101_reach", episodes=4, num_envs=2, seed=4,
                               overrides={"episode_s": 1.0})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.demos.recorder import expert_policy, record

TASK_TEXT = {"so101_reach": "reach the target", "so101_lift": "lift the cube"}


def record_expert_demos(
    root: Path,
    task: str,
    episodes: int,
    num_envs: int,
    seed: int,
    overrides: dict[str, Any] | None = None,
    only_success: bool = False,
) -> Path:
    """Record ``episodes`` episodes of ``task``'s scripted expert into ``root``; returns ``root``."""
    record(task, expert_policy, root, episodes, TASK_TEXT[task], num_envs=num_envs, seed=seed,
           overrides=overrides, only_success=only_success)
    return root


def clone_demos(root: Path, out: Path, *flags: str) -> Path:
    """A ``robot-rl bc`` run of the dataset ``root`` into ``out`` (no export) with ``flags``; returns ``out``."""
    from robot_rl.cli import main

    assert main(["bc", str(root), "--out", str(out), "--no-export", *flags]) == 0
    return out
