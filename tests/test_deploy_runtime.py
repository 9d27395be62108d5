"""Deploy runtime: onnxruntime inference vs torch, observation rebuilding (chunks: tests/test_chunk_executor.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.artifact import ArtifactError
from robot_rl.deploy.observation import (
    ObservationBuilder,
    RobotState,
    build_observation,
    projected_gravity,
    reorder_index,
)
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.export import PolicyHead, export_policy, make_meta

JOINTS = ["hip", "knee", "ankle"]


def humanoid_meta(chunk_length: int = 1):
    return make_meta(
        robot="toy_humanoid",
        joint_names=JOINTS,
        default_joint_pos=[0.1, 0.3, -0.2],
        observation_layout=[
            ("base_ang_vel", 3, 0.25),
            ("projected_gravity", 3, 1.0),
            ("velocity_command", 3, 1.0),
            ("joint_pos", 3, 1.0),
            ("joint_vel", 3, 0.05),
            ("last_action", 3, 1.0),
        ],
        action_scale=0.25,
        control_hz=50,
        chunk_length=chunk_length,
    )


def test_runtime_matches_torch_and_refuses_other_robot(tmp_path):
    meta = humanoid_meta(chunk_length=2)
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(18, 16), torch.nn.Tanh(), torch.nn.Linear(16, 6))
    head = PolicyHead(net, meta, obs_mean=torch.randn(18), obs_std=torch.rand(18) + 0.5)
    export_policy(head, meta, tmp_path, formats=("onnx",))
    runtime = PolicyRuntime(tmp_path, robot_joint_names=JOINTS)
    obs = np.random.default_rng(0).normal(size=18).astype(np.float32)
    with torch.no_grad():
        expected = head(torch.from_numpy(obs)[None]).numpy().reshape(2, 3)
    got = runtime.infer(obs)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    runtime.infer(-obs)  # preallocated ONNX buffers: a later call must not change an earlier result
    np.testing.assert_allclose(got, expected, atol=1e-5)
    with pytest.raises(ArtifactError, match="first difference at index 0"):
        PolicyRuntime(tmp_path, robot_joint_names=["knee", "hip", "ankle"])


def test_projected_gravity_by_hand():
    np.testing.assert_allclose(projected_gravity(np.array([1.0, 0, 0, 0])), [0, 0, -1], atol=1e-12)
    # rolled +90 deg about x: the world's down is the body's -y... body y axis points world +z
    c = np.cos(np.pi / 4)
    np.testing.assert_allclose(projected_gravity(np.array([c, c, 0, 0])), [0, -1, 0], atol=1e-12)
    # pitched +90 deg about y: body x points world -z, so gravity is +x in the body
    np.testing.assert_allclose(projected_gravity(np.array([c, 0, c, 0])), [1, 0, 0], atol=1e-12)
    with pytest.raises(ValueError, match="not a rotation"):
        projected_gravity(np.zeros(4))


def test_build_observation_by_hand():
    meta = humanoid_meta()
    msg_names = ["ankle", "hip", "knee", "wrist"]
    msg_pos = np.array([-0.1, 0.5, 0.3, 9.0])
    idx = reorder_index(msg_names, JOINTS)
    state = RobotState(
        joint_pos=msg_pos[idx],
        joint_vel=np.array([2.0, -4.0, 0.0, 7.0])[idx],
        imu_quat_wxyz=np.array([1.0, 0, 0, 0]),
        imu_gyro=np.array([4.0, 0.0, -8.0]),
        velocity_command=np.array([0.5, 0.0, 0.1]),
    )
    obs = build_observation(meta, state, last_action=np.array([1.0, -1.0, 0.5]))
    expected = [1.0, 0.0, -2.0, 0, 0, -1, 0.5, 0.0, 0.1, 0.4, 0.0, 0.1, -0.2, 0.0, 0.1, 1.0, -1.0, 0.5]
    np.testing.assert_allclose(obs, expected, atol=1e-6)
    assert obs.dtype == np.float32
    with pytest.raises(ArtifactError, match=r"lacks joints \['knee'\]"):
        reorder_index(["hip", "ankle"], JOINTS)
    with pytest.raises(ValueError, match="velocity command"):
        no_command = RobotState(state.joint_pos, state.joint_vel, state.imu_quat_wxyz, state.imu_gyro)
        build_observation(meta, no_command, np.zeros(3))
    np.testing.assert_allclose(to_raw(meta.action, np.array([0.35, 0.3, -0.45])), [1.0, 0.0, -1.0])
    # the control loop's builder: the same values in one reused buffer
    builder = ObservationBuilder(meta)
    first = builder.build(state, np.array([1.0, -1.0, 0.5]))
    np.testing.assert_allclose(first, expected, atol=1e-6)
    state.joint_vel = state.joint_vel * 2.0
    second = builder.build(state, np.array([1.0, -1.0, 0.5]))
    assert second is first and second.dtype == np.float32
    np.testing.assert_allclose(second[12:15], [-0.4, 0.0, 0.2], atol=1e-6)  # 2 x [-4, 0, 2] x 0.05


def test_cube_pos_term_by_hand():
    """The lift policy's object term: the object pose in the base frame, times its scale; missing -> ValueError."""
    meta = make_meta(robot="toy_arm", joint_names=JOINTS, default_joint_pos=[0.1, 0.3, -0.2],
                     observation_layout=[("joint_pos", 3, 1.0), ("cube_pos", 3, 2.0), ("last_action", 3, 1.0)],
                     action_scale=0.5, control_hz=25, task="so101_lift")
    state = RobotState(joint_pos=np.array([0.2, 0.3, 0.0]), joint_vel=np.zeros(3),
                       cube_pos=np.array([0.17, -0.04, 0.0125]))
    obs = build_observation(meta, state, last_action=np.array([0.5, 0.0, -1.0]))
    np.testing.assert_allclose(obs, [0.1, 0.0, 0.2, 0.34, -0.08, 0.025, 0.5, 0.0, -1.0], atol=1e-6)
    with pytest.raises(ValueError, match="'cube_pos' needs an object pose"):
        build_observation(meta, RobotState(state.joint_pos, state.joint_vel), np.zeros(3))
