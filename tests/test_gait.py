"""The gait clock of g1_stand_gait / g1_walk_gait: its math by hand, the sim and deploy twins, the env's terms."""

import math

import numpy as np
import pytest
import torch

import sim
from robot_rl.deploy import observation as deploy_obs
from robot_rl.deploy.artifact import OBSERVATION_TERMS
from robot_rl.export import make_meta
from sim.randomization import DomainRandCfg
from sim.tasks import g1_terms, terms

QUIET = {"init_joint_noise": 0.0, "randomization": DomainRandCfg(), "observation_noise": False}
"""No initial-pose noise, no domain randomisation (no pushes), no sensor noise."""


def test_gait_clock_by_hand():
    """0.8 s period at 50 Hz: 40 steps per cycle; step 10 is a quarter, step 50 wraps to a quarter."""
    steps = torch.tensor([0, 10, 20, 40, 50])
    clock = terms.gait_clock(steps, 0.02)
    torch.testing.assert_close(clock, torch.tensor([0.0, 0.25, 0.5, 0.0, 0.25]), atol=1e-6, rtol=0)


def test_leg_phases_and_schedule_by_hand():
    """Right leg half a cycle behind; stance while phase < 0.55; swing height counts only feet in the air."""
    phases = g1_terms.leg_phases(torch.tensor([0.75, 0.2]))
    torch.testing.assert_close(phases, torch.tensor([[0.75, 0.25], [0.2, 0.7]]))
    # env 0: left swing (0.75), right stance (0.25); env 1: left stance (0.2), right swing (0.7)
    contact = torch.tensor([[False, True], [False, False]])
    torch.testing.assert_close(g1_terms.contact_schedule_match(contact, phases, 0.55), torch.tensor([2.0, 1.0]))
    heights = torch.tensor([[0.10, 0.0], [0.03, 0.08]])
    # env 0: left (0.10-0.08)^2 = 4e-4, right in contact 0; env 1: (0.03-0.08)^2 = 2.5e-3, (0)^2
    torch.testing.assert_close(g1_terms.swing_height_error(heights, contact, 0.08), torch.tensor([4e-4, 2.5e-3]))


def test_sim_and_deploy_gait_phase_agree():
    """One period constant on both sides, and the same (sin, cos) at every step of two cycles."""
    assert terms.GAIT_PERIOD_S == deploy_obs.GAIT_PERIOD_S
    assert "gait_phase" in OBSERVATION_TERMS
    steps = torch.arange(81)
    clock = terms.gait_clock(steps, 0.02)
    sim_values = torch.stack([torch.sin(2 * math.pi * clock), torch.cos(2 * math.pi * clock)], dim=1)
    deploy_values = np.stack([deploy_obs.gait_phase(int(k) * 0.02) for k in steps])
    np.testing.assert_allclose(deploy_values, sim_values.numpy(), atol=1e-5)
    np.testing.assert_allclose(deploy_obs.gait_phase(0.2), [1.0, 0.0], atol=1e-12)  # a quarter cycle


@pytest.mark.robot_assets("unitree_g1")
def test_stand_gait_env_observes_its_clock_and_the_deploy_builder_rebuilds_it():
    """g1_stand_gait: gait_phase is the policy group's last term, (0, 1) after a reset, the episode's clock after
    steps; the deploy builder's rebuild from RobotState (gait_time_s = steps x period) matches the whole policy
    observation; the contact-schedule reward counts the feet in step with the clock."""
    env = sim.make_env("g1_stand_gait", num_envs=2, seed=1, **QUIET)
    obs = env.reset(seed=1)
    assert env.observation_layout["policy"][-1] == ("gait_phase", 2, 1.0)
    assert "gait_contact" in env.cfg.rewards and "feet_swing_height" in env.cfg.rewards
    assert env.robot.control.action_scale == 1.0  # +-1 rad from the default pose: room for a step
    np.testing.assert_allclose(obs["policy"][:, -2:].numpy(), [[0.0, 1.0]] * 2, atol=1e-6)
    for _ in range(7):
        step = env.step(torch.zeros(2, env.action_dim))
    angle = 2 * math.pi * 7 * env.dt / terms.GAIT_PERIOD_S
    np.testing.assert_allclose(step.obs["policy"][:, -2:].numpy(), [[math.sin(angle), math.cos(angle)]] * 2,
                               atol=1e-5)
    meta = make_meta(env.robot.name, env.robot.joint_names, env.default_joint_pos.tolist(),
                     env.observation_layout["policy"], env.robot.control.action_scale, env.robot.control.policy_hz)
    _, data = env.backend.snapshot(0)
    state = deploy_obs.RobotState(
        joint_pos=env.state.joint_pos[0].double().numpy(), joint_vel=env.state.joint_vel[0].double().numpy(),
        imu_quat_wxyz=data.sensor("imu_quat").data.copy(), imu_gyro=data.sensor("imu_gyro").data.copy(),
        velocity_command=np.zeros(3), gait_time_s=7 / env.robot.control.policy_hz)
    rebuilt = deploy_obs.build_observation(meta, state, env.action[0].double().numpy())
    np.testing.assert_allclose(rebuilt, step.obs["policy"][0].numpy(), atol=1e-4)
    # standing on both feet at clock 0.175: left in stance (matches), right due to swing (does not)
    assert env.foot_contact.all()
    torch.testing.assert_close(step.info["reward_terms"]["gait_contact"], torch.tensor([0.18, 0.18]))
    torch.testing.assert_close(step.info["reward_terms"]["feet_swing_height"], torch.zeros(2))
