"""A humanoid policy (IMU + velocity command observations) against the simulated Unitree G1."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from geometry_msgs.msg import Twist
from ros_support import Nodes, Probe, fresh_domain_id

from robot_rl.export import PolicyHead, export_policy, make_meta

pytestmark = pytest.mark.ros

ASSETS = Path(__file__).resolve().parents[3] / "shared" / "robots"


def test_g1_policy_node_runs_on_imu_and_cmd_vel(tmp_path, monkeypatch):
    if not os.environ.get("ROBOT_RL_ASSETS"):
        monkeypatch.setenv("ROBOT_RL_ASSETS", str(ASSETS))
    from sim.robots import load_robot

    robot = load_robot("unitree_g1")
    A = robot.num_joints
    layout = [("base_ang_vel", 3, 0.25), ("projected_gravity", 3, 1.0), ("velocity_command", 3, 1.0),
              ("joint_pos", A, 1.0), ("joint_vel", A, 0.05), ("last_action", A, 1.0)]
    meta = make_meta("unitree_g1", robot.joint_names, [j.default for j in robot.joints], layout,
                     robot.control.action_scale, robot.control.policy_hz, task="g1_stand")
    net = torch.nn.Linear(meta.observation_dim, A)
    with torch.no_grad():  # raw = 4 * gravity_x: a command that depends on the IMU quaternion
        net.weight.zero_()
        net.weight[:, 3] = 4.0
        net.bias.zero_()
    policy = export_policy(PolicyHead(net, meta), meta, tmp_path / "policy", formats=("onnx",))

    domain = fresh_domain_id()
    probe = Probe(domain, robot.joint_names, command_topic="joint_group_position_controller/commands")
    cmd_vel = probe.node.create_publisher(Twist, "cmd_vel", 10)
    probe.node.create_timer(0.1, lambda: cmd_vel.publish(Twist()))
    nodes = Nodes("sim2sim.launch.yaml", {"policy": str(policy), "robot": "unitree_g1"}, domain, tmp_path)
    try:
        assert probe.wait_for(lambda: len(probe.received()) >= 100, 90), nodes.log("policy_node")
    finally:
        codes = nodes.stop()
        probe.close()
    commands = np.array([c for _, c in probe.received()])
    assert commands.shape[1] == A and np.all(np.isfinite(commands))
    default = np.array([j.default for j in robot.joints])
    limits = np.array([[j.lower, j.upper] for j in robot.joints])
    assert np.all(commands >= limits[:, 0] - 1e-9) and np.all(commands <= limits[:, 1] + 1e-9)
    # the G1 starts upright and tips: gravity_x moves the targets away from the default pose
    assert np.abs(commands[-20:] - default).max() > 1e-3
    assert codes == {"sim_robot": 0, "policy_node": 0}, nodes.log("sim_robot") + nodes.log("policy_node")
