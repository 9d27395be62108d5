"""Sim-to-sim over real DDS: MuJoCo simulated SO-101 + policy node, started from sim2sim.launch.yaml.

The policy is made in the test: a joint-space servo towards a configuration q* (target =
(q + q*) / 2 each step, fixed point q*), exported like a trained policy. The simulated robot
plays reach episodes whose target is the gripper position at q*, with 5 ms command latency and
sensor noise; success is the training task's criterion (gripper within 2 cm at episode end),
required of every episode after the first (which overlaps the policy node's start-up).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ros_support import Nodes, Probe, fresh_domain_id, run_sim2sim
from std_msgs.msg import Float64MultiArray

from robot_rl.export import PolicyHead, export_policy, make_meta
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
DEFAULT = np.array([j.default for j in ROBOT.joints])
Q_STAR = DEFAULT + np.array([0.3, 0.2, -0.3, 0.2, 0.0, 0.0])
SCALE = ROBOT.control.action_scale


def servo_policy(tmp_path) -> str:
    layout = [("joint_pos", 6, 1.0), ("joint_vel", 6, 0.1), ("target_pos", 3, 1.0), ("last_action", 6, 1.0)]
    meta = make_meta("so101", ROBOT.joint_names, DEFAULT, layout, SCALE, ROBOT.control.policy_hz,
                     task="so101_reach")
    lin = torch.nn.Linear(meta.observation_dim, 6)
    with torch.no_grad():  # raw = (0.5 (q - default) + 0.5 (q* - default)) / scale
        lin.weight.zero_()
        lin.weight[:, :6] = 0.5 / SCALE * torch.eye(6)
        lin.bias.copy_(torch.as_tensor(0.5 * (Q_STAR - DEFAULT) / SCALE, dtype=torch.float32))
    return str(export_policy(PolicyHead(lin, meta), meta, tmp_path / "policy", formats=("onnx",)))


def test_closed_loop_reaches_target_in_sim2sim(tmp_path):
    domain = fresh_domain_id()
    probe = Probe(domain, ROBOT.joint_names)
    episodes = probe.record(Float64MultiArray, "sim/episode")
    sim_params = {
        "task": "so101_reach",
        "target_joint_pos": "[" + ",".join(f"{x:.6f}" for x in Q_STAR) + "]",
        "episode_s": 3.0,
        "command_latency_s": 0.005,
        "position_noise": 0.002,
        "velocity_noise": 0.02,
    }
    nodes = Nodes("sim2sim.launch.yaml", {"policy": servo_policy(tmp_path)}, domain, tmp_path,
                  extra={"sim_robot": sim_params})
    run_sim2sim(probe, nodes, episodes, 3, 60)
    # The simulated robot starts its first episode before the policy node is up and ramping
    # (soft start), so that episode is not a closed-loop trial; every later one must succeed.
    results = [list(m.data) for m in episodes][1:]
    assert len(results) >= 2
    assert all(success == 1.0 and distance < 0.02 for _, success, distance in results), results


def test_reach_task_draws_from_the_training_tasks_target_table():
    """Without target_joint_pos the simulated robot draws targets from the task's public target_distribution()."""
    from types import SimpleNamespace

    from ros_nodes.sim_robot_node import _ReachTask

    import sim

    node = SimpleNamespace(p={"target_topic": "target", "success_radius": 0.5, "task": "so101_reach", "seed": 3,
                              "episode_s": 0.0},
                           target_joint_pos=[], names=ROBOT.joint_names, task_env=sim.make_env("so101_reach", seed=3),
                           create_publisher=lambda *args: None)
    task = _ReachTask(node)
    env = sim.make_env("so101_reach", num_envs=1, seed=3)
    np.testing.assert_array_equal(task.table, env.target_distribution().numpy().astype(np.float64))
    assert task.success_radius == env.cfg.params["success_radius"]
    assert task.episode_s == env.cfg.episode_s  # episode_s 0: the task's own
    env.close()
    lift = SimpleNamespace(**{**vars(node), "p": {**node.p, "task": "so101_lift"},
                              "task_env": sim.make_env("so101_lift")})
    with pytest.raises(ValueError, match="has no target table"):
        _ReachTask(lift)


def test_sim2sim_command_prints_the_policy_nodes_statistics(tmp_path, capsys):
    """``robot-rl deploy sim2sim --episodes N`` ends with the policy node's own line: its latency, the commands its
    safety layer changed, its inferences (one per command for a vector policy, except the ticks it held the last
    command on a stale joint state: a loaded machine delays JointStates) — what a user checks before hardware."""
    import re

    from robot_rl.cli import main

    code = main(["deploy", "sim2sim", "--robot", "so101", "--policy", servo_policy(tmp_path), "--episodes", "2",
                 "--episode-s", "1.5", "--domain-id", str(fresh_domain_id()), "--sim-rt-priority", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "sim2sim so101: 2 episodes" in out
    line = next(x for x in out.splitlines() if x.startswith("policy node: latency"))
    commands = int(re.search(r"of (\d+) commands rate-limited", line).group(1))
    inferences = int(re.search(r"(\d+) inferences", line).group(1))
    stale = int(m.group(1)) if (m := re.search(r"(\d+) ticks held the last command on a stale", line)) else 0
    assert commands >= 2 * 1.5 * ROBOT.control.policy_hz * 0.5 and inferences <= commands <= inferences + stale, line
    assert "camera" not in line  # no cameras: no frame age
