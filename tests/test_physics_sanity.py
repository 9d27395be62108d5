"""Physics sanity of every shipped robot, on the real MuJoCo models built from robot.yaml.

Per robot (SO-101, Franka Panda, Unitree G1 with its floating base removed, i.e. welded in place):
the model's joint ranges are robot.yaml's limits; the default pose holds under the yaml's PD gains
for 2 s with the default pose as target (what a zero action commands); and joints driven to and
beyond both limits (targets ramped at the joint's speed, clamped by the actuator's control range)
never leave their limits by more than MuJoCo's soft-constraint give.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from sim.backends.mujoco_batch import MujocoBatchBackend
from sim.robots import RobotConfig, build_model, load_robot

ROBOTS = ["so101", "franka_panda", "unitree_g1"]
HOLD_TOLERANCE = 0.05
"""rad. Pure PD sags under gravity: measured 0.0004 (SO-101), 0.040 (Panda joint4, no gravity
compensation in the raw model) and 0.039 (G1 shoulder roll, kp 40)."""
LIMIT_TOLERANCE = 0.04
"""rad beyond a limit allowed to MuJoCo's soft joint-limit constraint, with targets ramped at up to
2 rad/s: measured 0.015 (SO-101 gripper), 0.014 (Panda joint2), 0.029 (G1 hip yaw)."""


def _welded(robot: RobotConfig):
    """Scene edit removing a floating base's free joint, so the base stays where the model puts it."""

    def edit(spec: mujoco.MjSpec) -> None:
        if robot.model.floating_base:
            spec.delete(spec.joint(robot.model.floating_base))

    return edit


def _backend(robot: RobotConfig) -> tuple[MujocoBatchBackend, mujoco.MjModel]:
    model = build_model(robot, _welded(robot))
    backend = MujocoBatchBackend(model, 2, robot.joint_names, {}, [], robot.control.decimation, nthread=1)
    default = torch.tensor([j.default for j in robot.joints])
    qpos = backend.default_qpos().repeat(2, 1)
    qpos[:, backend.joint_qpos_adr] = default
    backend.reset(np.arange(2), qpos, torch.zeros(2, model.nv), default.repeat(2, 1))
    return backend, model


@pytest.fixture(scope="module", params=ROBOTS)
def robot(request) -> RobotConfig:
    return load_robot(request.param)


def test_model_limits_are_the_yaml_limits(robot):
    model = build_model(robot, _welded(robot))
    for joint in robot.joints:
        j = model.joint(joint.name)
        assert bool(j.limited[0]), joint.name
        np.testing.assert_allclose(j.range, [joint.lower, joint.upper], atol=1e-4, err_msg=joint.name)
    assert model.nu == robot.num_joints


def test_default_pose_holds_under_pd_for_two_seconds(robot):
    backend, _ = _backend(robot)
    default = torch.tensor([j.default for j in robot.joints])
    worst = 0.0
    for _ in range(round(2.0 / robot.control.dt)):
        backend.step(default.repeat(2, 1))
        state = backend.read()
        worst = max(worst, (state.joint_pos - default).abs().max().item())
    assert worst < HOLD_TOLERANCE, f"{robot.name}: default pose drifted {worst:.4f} rad"
    assert state.joint_vel.abs().max().item() < 1e-2, f"{robot.name}: still moving after 2 s"


def test_joint_limits_are_respected(robot):
    backend, _ = _backend(robot)
    lower = torch.tensor([j.lower for j in robot.joints])
    upper = torch.tensor([j.upper for j in robot.joints])
    speed = torch.tensor([min(j.velocity, 2.0) for j in robot.joints])
    dt = robot.control.dt
    worst = torch.zeros(robot.num_joints)
    for goal in (upper + 0.2, lower - 0.2):
        target = backend.read().joint_pos[0].clone()
        steps = round((float(((goal - target).abs() / speed).max()) + 0.5) / dt)
        for _ in range(steps):
            target = target + torch.clamp(goal - target, -speed * dt, speed * dt)
            backend.step(torch.clamp(target, lower, upper).repeat(2, 1))
            q = backend.read().joint_pos
            worst = torch.maximum(worst, torch.maximum(q - upper, lower - q).amax(0))
    i = int(worst.argmax())
    assert worst[i] < LIMIT_TOLERANCE, f"{robot.name}: {robot.joint_names[i]} left its limits by {worst[i]:.4f} rad"
