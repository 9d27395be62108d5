"""A humanoid policy (IMU + velocity command observations) against the simulated Unitree G1."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from geometry_msgs.msg import Twist
from ros_support import Nodes, Probe, fresh_domain_id, run_sim2sim
from std_msgs.msg import Float64MultiArray

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


def test_g1_stand_episodes_over_ros_fall_when_the_training_sim_says(tmp_path, monkeypatch):
    """sim2sim plays g1_stand's episodes: the task's reset, its (zero) velocity command out on cmd_vel, falls scored
    with the task's terminations: ``sim/episode`` = [index, survived, length s] for every episode.

    Two untrained policies exported here, each also evaluated in the training sim (16 episodes): ``hold`` (raw 0:
    PD to the default pose; the G1 sags and falls after ~1.3 s in the training sim) and ``collapse`` (raw -1 on
    every joint: it falls after ~0.8 s). Over ROS every episode must end by a fall too, each within 25% of the
    training sim's mean length for the same artifact (measured: 1.20-1.28 s vs 1.29 s, 0.86-0.88 s vs 0.80 s).
    """
    if not os.environ.get("ROBOT_RL_ASSETS"):
        monkeypatch.setenv("ROBOT_RL_ASSETS", str(ASSETS))
    import sim
    from robot_rl.train.artifact_eval import evaluate_artifact
    from sim.robots import load_robot

    robot = load_robot("unitree_g1")
    env = sim.make_env("g1_stand", num_envs=1)
    meta = make_meta("unitree_g1", robot.joint_names, [j.default for j in robot.joints],
                     env.observation_layout["policy"], robot.control.action_scale, robot.control.policy_hz,
                     task="g1_stand")
    for name, bias in (("hold", 0.0), ("collapse", -1.0)):
        net = torch.nn.Linear(meta.observation_dim, robot.num_joints)
        with torch.no_grad():
            net.weight.zero_()
            net.bias.fill_(bias)
        policy = export_policy(PolicyHead(net, meta), meta, tmp_path / name, formats=("onnx",))
        in_sim = evaluate_artifact(policy, 16, 16, seed=0)
        in_sim_s = in_sim["length_mean"] * env.dt
        assert in_sim["survival_rate"] == 0.0 and in_sim_s < 2.0
        domain = fresh_domain_id()
        probe = Probe(domain, robot.joint_names, command_topic="joint_group_position_controller/commands")
        episodes, commands = probe.record(Float64MultiArray, "sim/episode"), probe.record(Twist, "cmd_vel")
        nodes = Nodes("sim2sim.launch.yaml", {"policy": str(policy), "robot": "unitree_g1"}, domain, tmp_path / name,
                      extra={"sim_robot": {"task": "g1_stand", "episode_s": 3.0},
                             # the packaged 3 s ramp would span episodes; a 50 ms stall must not hold the robot
                             "policy_node": {"soft_start_s": 0.0, "stale_state_timeout": 0.5}})
        run_sim2sim(probe, nodes, episodes, 3, 90)
        index = [m.data[0] for m in episodes]  # consecutive (the first may go out before the probe is discovered)
        assert index == list(range(int(index[0]), int(index[0]) + len(index))), index
        assert commands and all(c.linear.x == c.linear.y == c.angular.z == 0.0 for c in commands)  # g1_stand: zero
        ros = [(m.data[1], m.data[2]) for m in episodes[1:]]  # the first overlaps the policy node's start-up
        assert all(survived == 0.0 and abs(length - in_sim_s) < 0.25 * in_sim_s for survived, length in ros), (
            name, ros, in_sim_s)
