"""Keyboard teleop: the key mapping with synthetic events, the terminal reader on a real pseudo-terminal,
and teleop-driven recording in the real MuJoCo sim.

What is not tested here: a human at a physical keyboard (the pty stands in for the terminal; the
bytes it delivers are the ones a terminal sends for those keys).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import numpy as np
import pytest
import torch

import sim
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.recorder import record
from robot_rl.demos.replay import replay
from robot_rl.demos.teleop import (
    KeyTeleop,
    NoKeyboardError,
    TeleopQuit,
    TerminalKeys,
    decode_keys,
    map_key,
    teleop_policy,
)

LOWER, UPPER = np.full(6, -1.0), np.full(6, 1.0)


class Script:
    """A KeySource replaying a list of per-step key lists (then nothing)."""

    def __init__(self, steps: list[list[str]]) -> None:
        self.steps = list(steps)

    def poll(self) -> list[str]:
        return self.steps.pop(0) if self.steps else []


def test_key_mapping_joint_mode():
    assert map_key("q", "joint", 6) == ("joint", 0, 1.0) and map_key("h", "joint", 6) == ("joint", 5, -1.0)
    assert map_key("u", "joint", 6) is None and map_key("u", "joint", 7) == ("joint", 6, 1.0)
    assert map_key("up", "joint", 6) is None and map_key("esc", "ee", 6) == ("quit", 0, 0.0)
    with pytest.raises(ValueError, match="mode"):
        map_key("q", "cartesian", 6)
    t = KeyTeleop(np.zeros(6), LOWER, UPPER, joint_step=0.1)
    np.testing.assert_allclose(t.apply(["q", "q", "w", "s", "x"]), [0.2, 0, 0, 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(t.apply(["]", "h"]), [0.2, 0, 0, 0, 0, -0.2], atol=1e-12)  # doubled step
    t.apply(["q"] * 50)
    assert t.target[0] == 1.0  # clamped to the limit
    with pytest.raises(TeleopQuit):
        t.apply(["y", "esc"])
    assert t.target[5] == pytest.approx(0.0)  # keys before esc still applied


def test_key_mapping_ee_mode_uses_ik_and_gripper():
    seen = []

    def ik(dx: np.ndarray) -> np.ndarray:
        seen.append(dx.copy())
        return np.array([dx[0], dx[1], dx[2], 0, 0, 0])

    t = KeyTeleop(np.zeros(6), LOWER, UPPER, mode="ee", ee_step=0.01, joint_step=0.1, gripper=5)
    target = t.apply(["up", "up", "left", "s", "q"], ik)
    np.testing.assert_allclose(seen[0], [0.02, 0.01, -0.01])
    np.testing.assert_allclose(target, [0.02, 0.01, -0.01, 0, 0, 0.1], atol=1e-12)
    assert t.apply([], ik) is not None and len(seen) == 1  # no keys, no IK call


def test_terminal_reader_on_a_pseudo_terminal():
    assert decode_keys(b"q\x1b[Aa \x1b[D\x1b\x7f") == ["q", "up", "a", "space", "left", "esc", "backspace"]
    master, slave = pty.openpty()
    try:
        with TerminalKeys(slave) as keys:
            assert keys.poll() == []
            os.write(master, b"qq\x1b[B]")
            got: list[str] = []
            for _ in range(50):
                got += keys.poll()
                if len(got) >= 4:
                    break
                os.sched_yield()
            assert got == ["q", "q", "down", "]"]
    finally:
        os.close(master)
        os.close(slave)
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(NoKeyboardError, match="not a terminal"):
            TerminalKeys(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_teleop_records_a_replayable_sim_dataset(tmp_path):
    torch.set_num_threads(1)
    steps = [["q"]] * 10 + [["a", "a"]] * 5 + [["esc"]]  # pan +0.2 rad, back 0.2 rad, then quit
    policy = teleop_policy(Script(steps), mode="joint", realtime=False)
    with pytest.raises(TeleopQuit):
        record("so101_reach", policy, tmp_path / "ds", 3, "teleop", num_envs=1, source="teleop:keyboard",
               overrides={"episode_s": 0.4})
    ds = LeRobotDataset(tmp_path / "ds")  # the episode in progress at esc is dropped, the first is kept
    assert ds.num_episodes == 1 and len(ds.episode(0)["action"]) == 10
    pan = ds.episode(0)["action"][:, 0]
    start = ds.episode(0)["observation.state"][0, 0]
    np.testing.assert_allclose(pan - start, 0.02 * np.arange(1, 11), atol=1e-5)
    assert replay(tmp_path / "ds", 0).max_abs.max() < 1e-5  # a complete sim demo: replays exactly


def test_teleop_ee_mode_moves_the_gripper_along_x():
    torch.set_num_threads(1)
    env = sim.make_env("so101_reach", num_envs=1, seed=0)
    env.reset(seed=0)
    policy = teleop_policy(Script([["up"]] * 20), mode="ee", realtime=False)
    before = env.state.site("end_effector")[0].cpu().numpy().copy()
    for _ in range(25):
        env.step(policy(env, {}))
    moved = env.state.site("end_effector")[0].cpu().numpy() - before
    env.close()
    assert 0.05 < moved[0] < 0.12, moved  # 20 presses of 5 mm
    assert abs(moved[1]) < 0.3 * moved[0] and abs(moved[2]) < 0.3 * moved[0], moved


def test_record_command_reads_keys_from_a_terminal(tmp_path):
    """`robot-rl record --source teleop` with a pseudo-terminal as its keyboard (a real TTY device)."""
    master, slave = pty.openpty()
    out = tmp_path / "kb"
    cmd = [sys.executable, "-m", "robot_rl.cli", "record", "--source", "teleop", "--task", "so101_reach",
           "--episodes", "1", "--override", "episode_s=0.4", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        banner = proc.stdout.readline().decode()
        assert "teleop (joint mode)" in banner, banner
        os.write(master, b"qqqqq")  # five presses: shoulder_pan +0.1 rad from the first tick on
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, banner + output
    assert "recorded 1 episodes" in output
    e = LeRobotDataset(out).episode(0)
    np.testing.assert_allclose(e["action"][:, 0] - e["observation.state"][0, 0], 0.1, atol=1e-5)
