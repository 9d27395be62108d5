"""so101_reach_deploy: so101_reach plus the ROS 2 loop's actuator delay and the simulated robot's sensor noise."""

from __future__ import annotations

import math

import numpy as np
import torch

import sim
from robot_rl.compose import compose
from sim.tasks.so101_reach import DEPLOY_ACTUATOR_DELAY_S, DEPLOY_SENSOR_NOISE


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


def test_the_default_recipe_is_the_deploy_variant():
    """`robot-rl train` with no overrides trains what `robot-rl deploy sim2sim` plays (docs/deploy.md, section 0)."""
    cfg = compose([])
    assert cfg.task.name == "so101_reach_deploy" and cfg.task.total_steps == 3_000_000 and cfg.task.num_envs == 128
    env = sim.make_env(cfg.task.name, num_envs=2)
    assert env.cfg.randomization.actuator_delay_s == DEPLOY_ACTUATOR_DELAY_S
    assert compose(["task=so101_reach"]).task.name == "so101_reach"  # the undelayed task stays one override away


def test_training_config_selects_the_variant():
    cfg = compose(["task=so101_reach_deploy"])
    assert cfg.task.name == "so101_reach_deploy" and cfg.task.total_steps >= 2_000_000
