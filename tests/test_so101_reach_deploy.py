"""so101_reach_deploy: so101_reach plus the ROS 2 loop's actuator delay and the simulated robot's sensor noise."""

from __future__ import annotations

import math

import numpy as np
import torch

import sim
from robot_rl.compose import compose
from sim.robots import load_robot
from sim.tasks.so101_reach import (
    DEPLOY_ACTUATOR_DELAY_S,
    DEPLOY_COMMAND_EXCESS_WEIGHT,
    DEPLOY_MAX_STEP_CHANGE,
    DEPLOY_SENSOR_NOISE,
    DEPLOY_START_AT_REACH_FRACTION,
)


def test_deploy_variant_adds_delay_and_sim_robot_noise_to_so101_reach():
    plain = sim.make_env("so101_reach", num_envs=16, seed=0)
    deploy = sim.make_env("so101_reach_deploy", num_envs=16, seed=0)
    assert deploy.observation_layout == plain.observation_layout  # the same artifact interface
    torch.testing.assert_close(deploy.target_table, plain.target_table)  # the same targets
    assert deploy.cfg.randomization.actuator_delay_s == DEPLOY_ACTUATOR_DELAY_S
    deploy.reset(seed=0)  # delays are drawn per env at every reset
    delays = deploy.backend.expand("actuator_delay")
    assert delays.min() >= DEPLOY_ACTUATOR_DELAY_S[0] and delays.max() <= DEPLOY_ACTUATOR_DELAY_S[1]
    assert delays.max() - delays.min() > 0.5 * (DEPLOY_ACTUATOR_DELAY_S[1] - DEPLOY_ACTUATOR_DELAY_S[0])
    # uniform noise of half-width sqrt(3) * std has the simulated robot's std (velocity after its 0.1 scale)
    pos_std, vel_std = DEPLOY_SENSOR_NOISE
    noise = deploy._policy_noise.numpy()
    np.testing.assert_allclose(noise[:6], math.sqrt(3) * pos_std, rtol=1e-6)
    np.testing.assert_allclose(noise[6:12], math.sqrt(3) * vel_std * 0.1, rtol=1e-6)
    assert not noise[12:].any()
    # measured: the std of the observation noise around the noiseless observation
    deploy._policy_noise = None
    clean = deploy._observations()["policy"]
    deploy._policy_noise = torch.as_tensor(noise)
    noisy = torch.stack([deploy._observations()["policy"] for _ in range(50)])
    std = (noisy - clean).std(dim=(0, 1)).numpy()
    np.testing.assert_allclose(std[:6], pos_std, rtol=0.1)
    np.testing.assert_allclose(std[6:12], 0.1 * vel_std, rtol=0.1)


def test_deploy_variant_starts_half_its_episodes_where_a_reach_could_have_ended():
    """Over ROS an episode starts where the last one ended; so101_reach_deploy trains on such starts too."""
    plain = sim.make_env("so101_reach", num_envs=256, seed=0)
    deploy = sim.make_env("so101_reach_deploy", num_envs=256, seed=0)
    assert plain.cfg.params["start_at_reach_fraction"] == 0.0
    assert deploy.cfg.params["start_at_reach_fraction"] == DEPLOY_START_AT_REACH_FRACTION == 0.5
    plain.reset(seed=0)
    deploy.reset(seed=0)
    default, noise = deploy.default_joint_pos, deploy.cfg.init_joint_noise + 1e-6
    assert ((plain.state.joint_pos - default).abs() <= noise).all()  # so101_reach: the default pose + noise
    q = deploy.state.joint_pos  # [256, 6]
    moved = from_table(q, deploy.start_table)
    assert 0.4 < moved.float().mean() < 0.6, moved.float().mean()
    assert ((q[~moved] - default).abs() <= noise).all() and ((q[:, 5] - default[5]).abs() <= noise).all()
    assert ((q[moved, :5] - default[:5]).abs() > 0.1).any(dim=1).float().mean() > 0.9  # away from the default pose
    # the start poses are the targets' kind: the gripper site inside the target workspace, at rest
    z = deploy.state.site("end_effector")[moved, 2]
    low, high = deploy.cfg.params["target_z_range"]
    assert z.min() >= low - 1e-4 and z.max() <= high + 1e-4
    assert deploy.state.joint_vel.abs().max() == 0.0
    # over training resets the draw repeats: done envs get new starts from the same mixture
    again = sim.make_env("so101_reach_deploy", num_envs=256, seed=0, start_at_reach_fraction=1.0)
    again.reset(seed=1)
    assert from_table(again.state.joint_pos, again.start_table).all()


def from_table(q: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``[N]`` bool: the arm joints of ``q [N, 6]`` are a row of ``table [M, 5]`` (to float32 precision)."""
    return (q[:, None, :5] - table[None]).abs().amax(dim=2).min(dim=1).values < 1e-5


def test_the_default_recipe_is_the_deploy_variant():
    """`robot-rl train` with no overrides trains what `robot-rl deploy sim2sim` plays (docs/deploy.md, section 0)."""
    cfg = compose([])
    assert cfg.task.name == "so101_reach_deploy" and cfg.task.total_steps == 3_000_000 and cfg.task.num_envs == 128
    env = sim.make_env(cfg.task.name, num_envs=2)
    assert env.cfg.randomization.actuator_delay_s == DEPLOY_ACTUATOR_DELAY_S
    # trained under the policy node's own rate limit, paying for commands the safety layer would change
    assert env.max_step_change == DEPLOY_MAX_STEP_CHANGE == load_robot("so101").safety.max_step_change
    assert env.cfg.rewards["command_excess"].weight == DEPLOY_COMMAND_EXCESS_WEIGHT < 0
    assert sim.make_env("so101_reach", num_envs=1).cfg.rewards["command_excess"].weight == 0.0
    assert compose(["task=so101_reach"]).task.name == "so101_reach"  # the undelayed task stays one override away


def test_training_config_selects_the_variant():
    cfg = compose(["task=so101_reach_deploy"])
    assert cfg.task.name == "so101_reach_deploy" and cfg.task.total_steps >= 2_000_000
