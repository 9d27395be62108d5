"""panda_reach on real MuJoCo: targets, base-frame observations, reaching by Jacobian IK (position
control), and the torque-controlled variant (motors, gravity compensation, joint-space PD in torque)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.control import override_control
from sim.math import clip_norm, dls_step
from sim.robots import load_robot
from sim.task_cfg import TaskCfg
from sim.tasks.panda_reach import panda_reach_cfg


@pytest.fixture(scope="module")
def env():
    environment = sim.make_env("panda_reach", num_envs=3, seed=0, observation_noise=False)
    environment.reset(seed=0)
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def torque_env():
    environment = sim.make_env("panda_reach_torque", num_envs=2, seed=0, observation_noise=False)
    environment.reset(seed=0)
    yield environment
    environment.close()


def test_targets_in_box_and_in_base_frame(env):
    p = env.cfg.params
    t = env.target
    assert torch.all((t[:, 0] >= p["target_x_range"][0]) & (t[:, 0] <= p["target_x_range"][1]))
    assert torch.all(t[:, 1].abs() <= p["target_y_max"])
    assert torch.all((t[:, 2] >= p["target_z_range"][0]) & (t[:, 2] <= p["target_z_range"][1]))
    obs = env.reset(seed=1)["policy"]
    names = [name for name, _, _ in env.observation_layout["policy"]]
    assert names == ["joint_pos", "joint_vel", "target_pos", "last_action"]
    torch.testing.assert_close(obs[:, 14:17], env.target - env.state.site("base"))
    assert env.action_dim == 7 and env.robot.control.action_type == "joint_position_delta_default"


def test_zero_action_holds_default_pose(env):
    env.reset(seed=2)
    for _ in range(50):
        env.step(torch.zeros(3, 7))
    assert (env.state.joint_pos - env.default_joint_pos).abs().max() < 0.01


def test_jacobian_ik_reaches_every_target(env):
    """Targets are feasible: damped-least-squares IK through the action space reaches each one."""
    env.reset(seed=3)
    body = int(env.model.site_bodyid[env.model.site("pinch").id])
    dofs = [int(env.model.joint(n).dofadr[0]) for n in env.robot.joint_names]
    reached = torch.zeros(3, dtype=torch.bool)
    for _ in range(150):
        site = env.state.site("end_effector")
        jacp, _ = env.jacobian(body, site)
        dq = dls_step(jacp[:, :, dofs].float(), clip_norm(env.target - site, 0.05), damping=0.05)
        step = env.step(env.action_for_targets(env.state.joint_pos + dq))
        reached |= step.info["success"]
        if reached.all():
            break
    assert reached.all(), f"distances {torch.linalg.norm(env.target - env.state.site('end_effector'), dim=1)}"


def test_torque_variant_uses_motors_with_gravity_compensation(torque_env):
    model = torque_env.model
    assert torque_env.robot.control.action_type == "joint_torque"
    assert np.all(model.actuator_biastype == mujoco.mjtBias.mjBIAS_NONE)  # motors, not servos
    effort = np.array([j.effort for j in torque_env.robot.joints])
    np.testing.assert_allclose(model.actuator_ctrlrange[:, 1], effort)
    assert model.body_gravcomp[model.body("link3").id] == 1.0
    torque_env.reset(seed=0)
    start = torque_env.state.joint_pos.clone()
    for _ in range(50):  # zero torque: the gravity-compensated arm stays put, as on the real Panda
        torque_env.step(torch.zeros(2, 7))
    assert (torque_env.state.joint_pos - start).abs().max() < 0.01
    push = torch.zeros(2, 7)
    push[:, 0] = 0.1  # 8.7 N m on joint1
    step = torque_env.step(push)
    assert torch.all(torque_env.state.joint_vel[:, 0] > 0.05)
    torch.testing.assert_close(torque_env.state.actuator_force[:, 0], torch.full((2,), 8.7), rtol=1e-4, atol=1e-4)
    assert "torque" in step.info["reward_terms"]


def test_joint_space_pd_in_torque_mode_reaches_a_pose(torque_env):
    torque_env.reset(seed=1)
    goal = torque_env.default_joint_pos + torch.tensor([0.3, 0.2, -0.2, 0.3, 0.2, -0.2, 0.3])
    effort = torque_env.joint_effort
    kp, kd = 100.0, 5.0  # stable as a 50 Hz discrete PD (the real robot runs torque loops at 1 kHz)
    for _ in range(150):
        torque = kp * (goal - torque_env.state.joint_pos) - kd * torque_env.state.joint_vel
        torque_env.step((torque / effort).clamp(-1, 1))
    assert (torque_env.state.joint_pos - goal).abs().max() < 0.02


def test_control_override_rejects_bad_keys():
    robot = load_robot("franka_panda")
    with pytest.raises(ValueError, match="'gain'"):
        override_control(robot, {"gain": 2.0})
    with pytest.raises(ValueError, match="'velocity'"):
        override_control(robot, {"action_type": "velocity"})
    assert override_control(robot, {"action_scale": 0.25}).control.action_scale == 0.25
    assert isinstance(panda_reach_cfg(torque=True), TaskCfg)
