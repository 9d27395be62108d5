"""The demo replay node over real DDS, through the policy node's safety layer.

1. A probe plays an ideal robot (its JointState is the last command received): nothing is sent
   before the first JointState, the soft start begins at the measured pose, no step exceeds the
   robot's max step, an e-stop holds until re-enabled, and the whole episode is then played.
2. `robot-rl replay --ros --sim`: the replay node drives the MuJoCo simulated robot node; the
   reported tracking error is that of the real PD servos; a dataset of other joints is refused.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from ros_support import Probe, fresh_domain_id, max_step
from std_msgs.msg import Bool
from std_srvs.srv import SetBool

from robot_rl.commands import replay as replay_cmd
from robot_rl.data.lerobot import LeRobotWriter
from robot_rl.demos.ros_launch import DemoNodes, write_demo_params
from robot_rl.deploy.ros_frames import ros_features
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
JOINTS = ROBOT.joint_names
DEFAULT = np.array([j.default for j in ROBOT.joints])
MAX_STEP = ROBOT.safety.max_step_change
FPS = 25


def write_episode(root, frames: int = 40, joints: list[str] = JOINTS) -> np.ndarray:
    """One episode: joint 0 starts 0.5 rad from the default pose, all joints sway by 0.1 rad."""
    t = np.arange(frames) / FPS
    actions = DEFAULT + 0.1 * np.sin(2 * np.pi * 0.5 * t)[:, None] * np.ones(len(joints))
    actions[:, 0] += 0.5
    with LeRobotWriter.create(root, fps=FPS, features=ros_features(joints, velocity=False), robot_type="so101") as w:
        for k in range(frames):
            w.add_frame({"observation.state": actions[max(k - 1, 0)], "action": actions[k]}, task="sway")
        w.save_episode()
    return actions


def test_replay_node_goes_through_the_safety_layer(tmp_path):
    actions = write_episode(tmp_path / "ds", frames=100)  # 4 s: the e-stop lands mid-play even on a loaded machine
    domain = fresh_domain_id()
    probe = Probe(domain, JOINTS)
    enable = probe.node.create_client(SetBool, "demo_replay/enable")
    params = write_demo_params(ROBOT.as_dict(), tmp_path / "params.yaml")
    report = tmp_path / "report.json"
    nodes = DemoNodes([("replay_node", "demo_replay", {"dataset": str(tmp_path / "ds"), "report_file": str(report),
                                                       "soft_start_s": 0.5})], params, domain, tmp_path / "logs")
    try:
        assert nodes.wait_log("demo_replay", "waiting for the first JointState", 60), nodes.log("demo_replay")
        time.sleep(0.5)
        assert probe.received() == [], "a command was sent before the first JointState"
        last = probe.received

        def ideal_robot(t: float) -> np.ndarray:  # at the last command received, or the default pose
            sent = last()
            return sent[-1][1] if sent else DEFAULT

        probe.state_fn = ideal_robot
        assert nodes.wait_log("demo_replay", "first recorded command: playing", 30), nodes.log("demo_replay")
        time.sleep(0.2)
        t_estop = time.monotonic()
        probe.estop_pub.publish(Bool(data=True))
        time.sleep(0.6)
        held = probe.received(t_estop + 0.15)
        assert len(held) >= 5 and all(np.array_equal(c, held[0][1]) for _, c in held), "e-stop did not hold"
        assert nodes.procs["demo_replay"].poll() is None, "the replay must wait while e-stopped"
        assert enable.wait_for_service(timeout_sec=10)
        future = enable.call_async(SetBool.Request(data=True))
        assert probe.wait_for(future.done, 10) and "soft start" in future.result().message
        assert nodes.wait("demo_replay", 30) == 0, nodes.log("demo_replay")
    finally:
        nodes.stop()
        probe.close()
    commands = probe.received()
    assert np.abs(commands[0][1] - DEFAULT).max() <= MAX_STEP + 1e-9  # soft start from the measured pose
    assert max_step(commands) <= MAX_STEP + 1e-9
    np.testing.assert_allclose(commands[-1][1], actions[-1], atol=1e-9)
    result = json.loads(report.read_text())
    assert result["played"] == result["frames"] == len(actions)
    assert result["events"]["estop"] >= 5 and result["events"]["soft_start"] > 0
    assert "replay finished" in nodes.log("demo_replay")


def test_replay_command_sim2sim_reports_servo_tracking(tmp_path, capsys):
    actions = write_episode(tmp_path / "ds", frames=50)
    report = tmp_path / "report.json"
    code = replay_cmd.main([str(tmp_path / "ds"), "--ros", "--sim", "--domain-id", str(fresh_domain_id()),
                            "--report", str(report), "--log-dir", str(tmp_path / "logs"), "--max-error", "0.3"])
    out = capsys.readouterr().out
    assert code == 0, out + (tmp_path / "logs/sim_robot.log").read_text()
    result = json.loads(report.read_text())
    assert result["played"] == len(actions) and "replayed 50/50 frames" in out
    # the MuJoCo PD servos lag the 25 Hz commands by a fraction of a step; an idle robot would miss by 0.5 rad
    cmd_rms = np.array(result["command_rms"])
    assert np.all(cmd_rms < 0.03) and np.all(cmd_rms > 0.0), cmd_rms
    # a dataset recorded for other joints is refused before anything is published
    write_episode(tmp_path / "other", frames=3, joints=[f"j{i}" for i in range(6)])
    code = replay_cmd.main([str(tmp_path / "other"), "--ros", "--robot", "so101", "--domain-id",
                            str(fresh_domain_id()), "--log-dir", str(tmp_path / "logs2")])
    assert code == 2
    assert "are not the robot's" in (tmp_path / "logs2/demo_replay.log").read_text()
