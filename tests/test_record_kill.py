"""A real ``robot-rl record`` process SIGKILLed mid-recording loses at most the episode in progress.

Each case starts the recorder, waits until its dataset has committed ``k`` episodes (``meta/info.json``
is the commit point) or, for ``k = 0``, until the output folder appears, kills it with SIGKILL, and
checks with :func:`robot_rl.data.lerobot.recovery.check_after_crash` that the folder is readable with
at least ``k`` complete episodes. ``record --resume`` then finishes the dataset without touching the
episodes that survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.lerobot.recovery import check_after_crash

EPISODES = 40
ARGV = ["record", "--task", "so101_reach", "--episodes", str(EPISODES), "--num-envs", "1", "--override",
        "episode_s=0.5"]


def _committed(root: Path) -> int:
    """Episodes ``meta/info.json`` counts now (-1 before it exists or while it is being replaced)."""
    try:
        return json.loads((root / "meta" / "info.json").read_text())["total_episodes"]
    except (OSError, ValueError, KeyError):
        return -1


def kill_recorder_after(root: Path, episodes: int, cwd: Path, argv: list[str] = ARGV) -> int:
    """Run ``robot-rl <argv> --out root`` and SIGKILL it once ``episodes`` are committed (0: once ``root``
    exists); returns the episodes committed at the kill. (``benchmarks/robustness.py`` may reuse it.)"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *argv, "--out", str(root)], cwd=cwd,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    seen = -1
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            seen = _committed(root)
            if (episodes == 0 and root.exists()) or seen >= episodes:
                break
            time.sleep(0.005)
        assert proc.poll() is None, f"the recorder ended before the kill point: {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return max(seen, 0)


@pytest.mark.parametrize("kill_after", [pytest.param(0, marks=pytest.mark.slow), 1,
                                        pytest.param(4, marks=pytest.mark.slow)])
def test_sigkilled_recorder_keeps_every_complete_episode_and_resumes(tmp_path: Path, kill_after: int) -> None:
    root = tmp_path / "demos"
    committed = kill_recorder_after(root, kill_after, tmp_path)
    readable, kept = check_after_crash(root)
    assert readable, f"killed after {committed} committed episodes, the dataset cannot be read or repaired"
    assert kept >= committed, f"{committed} episodes were committed before the kill, {kept} survived"
    survivors = []
    if kept:
        ds = LeRobotDataset(root)
        survivors = [ds.episode(e) for e in range(kept)]
    from robot_rl.cli import main

    assert main([*ARGV, "--out", str(root), "--resume"]) == 0
    ds = LeRobotDataset(root)
    assert ds.num_episodes == EPISODES
    for e, before in enumerate(survivors):
        after = ds.episode(e)
        for key, values in before.items():
            np.testing.assert_array_equal(after[key], values, err_msg=f"episode {e} {key} changed on resume")
    # the resumed episodes are new rollouts (seed + kept), not copies of the kept ones
    if kept:
        assert not np.array_equal(ds.episode(kept)["sim.target"], ds.episode(0)["sim.target"])


def test_check_after_crash_reports_an_unrepairable_folder(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{")
    assert check_after_crash(root) == (False, 0)
    assert check_after_crash(tmp_path / "never_created") == (True, 0)
