"""`robot-rl deploy check` and `robot-rl ros params` from the command line (no ROS needed)."""

from __future__ import annotations

import torch
import yaml

from robot_rl.cli import main as cli
from robot_rl.export import PolicyHead, export_policy, make_meta
from sim.robots import load_robot

ROBOT = load_robot("so101")
LAYOUT = [("joint_pos", 6, 1.0), ("joint_vel", 6, 0.1), ("target_pos", 3, 1.0), ("last_action", 6, 1.0)]


def artifact(tmp_path, default=None, layout=LAYOUT):
    default = default or [j.default for j in ROBOT.joints]
    meta = make_meta("so101", ROBOT.joint_names, default, layout, ROBOT.control.action_scale,
                     ROBOT.control.policy_hz, task="so101_reach")
    torch.manual_seed(0)
    net = torch.nn.Linear(meta.observation_dim, 6)
    return export_policy(PolicyHead(net, meta), meta, tmp_path / "policy", formats=("onnx",))


def test_check_accepts_matching_artifact(tmp_path, capsys):
    assert cli(["deploy", "check", str(artifact(tmp_path)), "--robot", "so101", "--runs", "5"]) == 0
    out = capsys.readouterr().out
    assert "sha256 verified" in out and "inference p50" in out and "ERROR" not in out


def test_check_refuses_other_robot_and_wrong_defaults_with_exit_2(tmp_path, capsys):
    path = artifact(tmp_path)
    assert cli(["deploy", "check", str(path), "--robot", "franka_panda"]) == 2
    assert "REFUSED: joint mismatch" in capsys.readouterr().err
    shifted = [j.default + 0.1 for j in ROBOT.joints]
    assert cli(["deploy", "check", str(artifact(tmp_path / "b", default=shifted)), "--robot", "so101"]) == 2
    err = capsys.readouterr().err
    assert "REFUSED: " in err and "policy.yaml: default_joint_pos[0] = 0.1: joint 'shoulder_pan' differs" in err


def test_check_flags_missing_ros_input_with_exit_1(tmp_path, capsys):
    layout = [("joint_pos", 6, 1.0), ("projected_gravity", 3, 1.0)]  # so101 has no IMU topic
    assert cli(["deploy", "check", str(artifact(tmp_path, layout=layout)), "--robot", "so101"]) == 1
    assert "needs ros.imu" in capsys.readouterr().out


def test_ros_params_cli_writes_file(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    assert cli(["ros", "params", "unitree_g1", "--policy", "/x", "--out", str(out)]) == 0
    params = yaml.safe_load(out.read_text())["/**/policy_node"]["ros__parameters"]
    assert params["imu_topic"] == "imu" and params["policy"] == "/x" and len(params["joint_names"]) == 29
