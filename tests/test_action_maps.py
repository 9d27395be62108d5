"""Action conversions: raw action <-> joint targets (robot_rl.deploy.actions) and [-1, 1] <-> box
(robot_rl.math.action_box), on hand values, and their twins (sim's TaskEnv, the exported PolicyHead)
pinned equal to them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.deploy.actions import action_spec, to_raw, to_targets
from robot_rl.deploy.artifact import ActionSpec, ArtifactError
from robot_rl.export import PolicyHead, make_meta
from robot_rl.math.action_box import from_unit, to_unit

DELTA = ActionSpec(type="joint_position_delta_default", scale=[0.5, 0.25], offset=[0.1, -1.0])


def test_action_spec_hand_values():
    spec = action_spec("joint_position_delta_default", 0.5, [0.1, -1.0])
    assert spec.offset == [0.1, -1.0] and spec.scale == [0.5, 0.5]
    assert action_spec("joint_position_delta_default", [0.5, 0.25], [0.1, -1.0]) == DELTA
    box = action_spec("joint_position", 9.0, [0.0, 0.0], joint_lower=[-1.0, 0.0], joint_upper=[1.0, 2.0])
    assert box.offset == [0.0, 1.0] and box.scale == [1.0, 1.0] and box.type == "joint_position"
    with pytest.raises(ValueError, match="pass joint_lower and joint_upper"):
        action_spec("joint_position", 0.5, [0.0])
    with pytest.raises(ArtifactError, match=r"action\.type = 'joint_torque': must be one of"):
        action_spec("joint_torque", 0.5, [0.0])


def test_to_targets_and_to_raw_hand_values():
    # target = offset + scale * clip(a): 0.1 + 0.5 * 1 = 0.6; -1 + 0.25 * -0.4 = -1.1; clip 3 -> 1
    np.testing.assert_allclose(to_targets(DELTA, np.array([1.0, -0.4])), [0.6, -1.1])
    np.testing.assert_allclose(to_targets(DELTA, np.array([[3.0, -3.0]])), [[0.6, -1.25]])
    np.testing.assert_allclose(to_raw(DELTA, np.array([0.6, -1.1])), [1.0, -0.4])
    np.testing.assert_allclose(to_raw(DELTA, np.array([5.0, -5.0])), [1.0, -1.0])  # beyond reach: clipped
    out = np.zeros(2)
    assert to_raw(DELTA, np.array([0.35, -1.0]), out=out) is out
    np.testing.assert_allclose(out, [0.5, 0.0])
    a = np.array([[0.3, -0.7], [-1.0, 1.0]])
    np.testing.assert_allclose(to_raw(DELTA, to_targets(DELTA, a)), a, atol=1e-12)


def test_box_map_hand_values():
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    np.testing.assert_allclose(from_unit(np.array([-1.0, 1.0]), low, high), [-2.0, 1.0])
    np.testing.assert_allclose(from_unit(np.array([0.5, 0.0]), low, high), [1.0, 0.5])
    np.testing.assert_allclose(to_unit(np.array([1.0, 0.5]), low, high), [0.5, 0.0])
    y = torch.tensor([[0.25, -0.75]])
    t_low, t_high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    assert torch.equal(from_unit(y, t_low, t_high), torch.tensor([[0.5, 0.125]]))
    assert torch.equal(to_unit(from_unit(y, t_low, t_high), t_low, t_high), y)


def test_box_map_is_the_joint_position_action_spec():
    """``joint_position``'s ActionSpec (mid-range, half-range) is the [-1, 1] -> [lower, upper] box map."""
    lower, upper = np.array([-1.5, 0.2]), np.array([0.5, 2.0])
    spec = action_spec("joint_position", 1.0, [0.0, 0.0], lower, upper)
    a = np.array([[-1.0, 1.0], [0.3, -0.6]])
    np.testing.assert_allclose(to_targets(spec, a), from_unit(a, lower, upper), atol=1e-12)
    np.testing.assert_allclose(to_raw(spec, to_targets(spec, a)), to_unit(to_targets(spec, a), lower, upper),
                               atol=1e-12)


def test_policy_head_is_the_torch_twin_of_to_targets():
    meta = make_meta("toy", ["a", "b"], [0.1, -1.0], [("joint_pos", 2, 1.0)], [0.5, 0.25], 50)
    head = PolicyHead(torch.nn.Identity(), meta)
    raw = torch.tensor([[1.0, -0.4], [3.0, -3.0], [0.2, 0.6]])
    np.testing.assert_allclose(head(raw).numpy(), to_targets(meta.action, raw.numpy()), atol=1e-6)


@pytest.mark.parametrize("action_type", ["joint_position_delta_default", "joint_position"])
def test_sim_twin_equals_deploy_mapping(action_type):
    """TaskEnv.actuator_command / action_for_targets (sim's copy) == to_targets / to_raw (+ joint limits)."""
    import sim

    env = sim.make_env("so101_reach", num_envs=3, control={"action_type": action_type})
    robot = env.robot
    lower, upper = env.joint_lower.numpy().astype(np.float64), env.joint_upper.numpy().astype(np.float64)
    spec = action_spec(action_type, robot.control.action_scale, env.default_joint_pos.numpy().astype(np.float64),
                       lower, upper)
    a = torch.tensor([[-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], [0.9, -0.9, 0.1, -0.1, 0.7, -0.3], [0.0] * 6])
    targets = env.actuator_command(a)
    np.testing.assert_allclose(targets.numpy(), np.clip(to_targets(spec, a.numpy()), lower, upper), atol=1e-6)
    inside = torch.clamp(targets, env.joint_lower, env.joint_upper)
    np.testing.assert_allclose(env.action_for_targets(inside).numpy(), to_raw(spec, inside.numpy()), atol=1e-5)
    if action_type == "joint_position":
        np.testing.assert_allclose(targets.numpy(), from_unit(a.numpy(), lower, upper), atol=1e-6)
        np.testing.assert_allclose(env.action_for_targets(targets).numpy(), a.numpy(), atol=1e-5)
    env.close()


def test_sim_action_for_targets_refuses_torque_control():
    import sim

    env = sim.make_env("so101_reach", num_envs=1, control={"action_type": "joint_torque"})
    with pytest.raises(ValueError, match="torque-controlled"):
        env.action_for_targets(torch.zeros(1, env.action_dim))
    env.close()
