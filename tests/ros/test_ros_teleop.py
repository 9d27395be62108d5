"""Keyboard teleop of the simulated robot node over real DDS, recorded by the recorder node.

The keys are a scripted sequence (no keyboard on the CI machine; the terminal reader itself is tested
on a real pseudo-terminal in tests/test_demos_teleop.py). The teleop node runs in the test process,
the simulated robot and the recorder as processes.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from ros_support import fresh_domain_id

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.ros_launch import DemoNodes, write_demo_params
from robot_rl.demos.ros_teleop import RosTeleop
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")


class Script:
    def __init__(self) -> None:
        self.steps: list[list[str]] = []

    def poll(self) -> list[str]:
        return self.steps.pop(0) if self.steps else []


def test_keyboard_teleop_drives_the_sim_robot_and_is_recorded(tmp_path):
    domain = fresh_domain_id()
    params = write_demo_params(ROBOT.as_dict(), tmp_path / "params.yaml")
    nodes = DemoNodes([("sim_robot_node", "sim_robot", {"publish_hz": 100.0}),
                       ("recorder_node", "demo_recorder", {"dataset": str(tmp_path / "ds"), "fps": 25})],
                      params, domain, tmp_path / "logs")
    keys = Script()
    teleop = RosTeleop(ROBOT.as_dict(), keys, domain)
    try:
        deadline = time.monotonic() + 60
        while "episode 0 started" not in nodes.log("demo_recorder") and time.monotonic() < deadline:
            teleop.step()
        assert teleop.sent > 0, nodes.log("sim_robot")
        settle = time.monotonic() + ROBOT.safety.soft_start_s + 0.2  # past the safety layer's soft start
        while time.monotonic() < settle:
            teleop.step()
        start = teleop.measured.copy()
        keys.steps = [["q"]] * 20 + [[]] * 5 + [["space"]] + [["a", "a"]] * 10 + [[]] * 5
        sent = [teleop.step() for _ in range(len(keys.steps))]
    finally:
        teleop.close()
        codes = nodes.stop()
    assert codes["demo_recorder"] == 0, nodes.log("demo_recorder")
    sent = np.array([c for c in sent if c is not None])
    # 20 presses of 0.02 rad up, 10 ticks of two presses down: shoulder_pan ends where it started
    assert sent[:, 0].max() - start[0] == pytest.approx(0.4, abs=1e-6)
    assert sent[-1, 0] == pytest.approx(start[0], abs=1e-6)
    assert np.abs(np.diff(sent, axis=0)).max() <= ROBOT.safety.max_step_change + 1e-9
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 2, nodes.log("demo_recorder")  # space split the session
    first, second = ds.episode(0), ds.episode(1)
    assert first["action"][:, 0].max() - first["action"][0, 0] > 0.35  # the ramp up was recorded
    assert second["action"][-1, 0] - second["action"][:, 0].max() < -0.35  # and the ramp down
    assert first["observation.state"][-1, 0] - first["observation.state"][0, 0] > 0.3  # the robot moved
