"""Batched gymnasium locomotion tasks against gymnasium itself, plus their pure reward functions.

For each task, env 0 of our batch and gymnasium's v5 env start from the same state (gymnasium's
``set_state``) and take the same random actions: the physics must be bit-identical and the
observations, reward terms and terminations equal to float32 rounding (~1e-6 relative).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import sim
from sim.tasks.gym_locomotion import GYM_LOCOMOTION
from sim.tasks.gym_rewards import (
    HealthyRule,
    contact_cost,
    control_cost,
    forward_velocity,
    is_healthy,
    mass_center_xy,
)

STEPS = 50


def _random_action(env: sim.VecEnv, g: torch.Generator) -> torch.Tensor:
    u = torch.rand(env.num_envs, env.action_dim, generator=g)
    return env.action_low + (env.action_high - env.action_low) * u


@pytest.mark.parametrize("task", list(GYM_LOCOMOTION))
def test_matches_gymnasium(task):
    env = sim.make_env(task, num_envs=2, seed=0)
    obs = env.reset(seed=7)
    genv = gym.make(GYM_LOCOMOTION[task].gym_id)
    genv.reset(seed=0)
    qpos = env.backend.batch.bind("qpos")
    qvel = env.backend.batch.bind("qvel")
    genv.unwrapped.set_state(qpos[0].copy(), qvel[0].copy())
    gdata = genv.unwrapped.data
    np.testing.assert_allclose(obs["policy"][0].numpy(), genv.unwrapped._get_obs(), rtol=1e-6, atol=1e-6)
    assert env.observation_dims["policy"] == genv.observation_space.shape[0]
    g = torch.Generator().manual_seed(1)
    contact_seen = False
    for t in range(STEPS):
        action = _random_action(env, g)
        step = env.step(action)
        gobs, greward, gterminated, gtruncated, ginfo = genv.step(action[0].double().numpy())
        if not step.done[0]:  # a done env is already reset
            np.testing.assert_array_equal(qpos[0], gdata.qpos, err_msg=f"physics differs at step {t}")
        ours = step.info["final_obs"]["policy"][0].numpy()
        scale = max(1.0, float(np.abs(gobs).max()))
        np.testing.assert_allclose(ours, gobs, rtol=1e-6, atol=1e-6 * scale, err_msg=f"obs at step {t}")
        assert math.isclose(step.reward[0].item(), greward, rel_tol=1e-6, abs_tol=1e-6), (t, step.reward[0], greward)
        for name, value in step.info["reward_terms"].items():
            assert math.isclose(value[0].item(), ginfo[f"reward_{name}"], rel_tol=1e-6, abs_tol=1e-6), (t, name)
        assert math.isclose(step.info["x_velocity"][0].item(), ginfo["x_velocity"], rel_tol=1e-6, abs_tol=1e-6)
        assert bool(step.terminated[0]) == gterminated and not gtruncated
        if "cfrc_ext" in GYM_LOCOMOTION[task].observation:
            contact_seen |= bool(np.any(gobs[-6 * (env.model.nbody - 1):] != 0.0))
        if gterminated:
            break
    if "cfrc_ext" in GYM_LOCOMOTION[task].observation:
        assert contact_seen, "no contact force was compared"
    env.close()


def test_unhealthy_terminates_and_resets():
    env = sim.make_env("hopper", num_envs=3, seed=0, healthy=HealthyRule(z_index=1, z_range=(5.0, math.inf)))
    env.reset(seed=0)
    step = env.step(torch.zeros(3, env.action_dim))
    assert step.terminated.all() and not step.truncated.any()
    assert step.info["reward_terms"]["survive"].eq(0).all()
    assert step.info["log"]["episode/length"] == 1.0
    assert not torch.equal(step.obs["policy"], step.info["final_obs"]["policy"])
    assert env.episode_step.eq(0).all()


def test_time_limit_is_truncation():
    env = sim.make_env("half_cheetah", num_envs=2, seed=0, max_episode_steps=3)
    env.reset(seed=0)
    zero = torch.zeros(2, env.action_dim)
    assert not env.step(zero).done.any() and not env.step(zero).done.any()
    step = env.step(zero)
    assert step.truncated.all() and not step.terminated.any()
    assert step.info["log"]["episode/length"] == 3.0
    assert set(step.info["log"]) >= {"episode/return", "episode_reward/forward", "episode_reward/ctrl"}


def test_reset_noise_and_seed():
    cfg = GYM_LOCOMOTION["walker2d"]
    env = sim.make_env("walker2d", num_envs=64, seed=3)
    qpos = torch.tensor(env.backend.batch.bind("qpos"))
    qvel = torch.tensor(env.backend.batch.bind("qvel"))
    qpos0 = torch.as_tensor(env.model.qpos0)
    assert (qpos - qpos0).abs().max() <= cfg.reset_noise_scale and qvel.abs().max() <= cfg.reset_noise_scale
    assert (qpos - qpos0).abs().max() > 0.5 * cfg.reset_noise_scale
    again = sim.make_env("walker2d", num_envs=64, seed=3)
    torch.testing.assert_close(again.reset(seed=5), env.reset(seed=5), rtol=0, atol=0)
    other = sim.make_env("walker2d", num_envs=64, seed=3).reset(seed=6)
    assert not torch.equal(other["policy"], env.reset(seed=5)["policy"])


def test_actions_are_clipped_to_ctrlrange():
    a, b = (sim.make_env("humanoid", num_envs=1, seed=0) for _ in range(2))
    big = torch.full((1, a.action_dim), 3.0)
    sa, sb = a.step(big), b.step(a.action_high[None].clone())
    torch.testing.assert_close(sa.obs, sb.obs, rtol=0, atol=0)
    torch.testing.assert_close(sa.reward, sb.reward, rtol=0, atol=0)


def test_bad_override_names_the_setting():
    with pytest.raises(ValueError, match=r"no setting 'ctrl_weight'.*ctrl_cost_weight"):
        sim.make_env("ant", ctrl_weight=0.1)


# ----------------------------------------------------------------------------- pure functions
def test_is_healthy_hand_computed():
    hopper = HealthyRule(z_index=1, z_range=(0.7, math.inf), angle_range=(-0.2, 0.2), state_range=(-100.0, 100.0))
    qpos = torch.tensor([[0.0, 1.2, 0.1, 0.0], [0.0, 0.7, 0.0, 0.0], [0.0, 1.2, 0.25, 0.0], [0.0, 1.2, 0.0, 0.0]])
    qvel = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 100.0]])
    # healthy; z on the open bound; angle out; a velocity on the open state bound
    assert is_healthy(qpos, qvel, hopper).tolist() == [True, False, False, False]
    ant = HealthyRule(z_index=2, z_range=(0.2, 1.0), z_inclusive=True, require_finite=True)
    qpos = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.2], [0.0, 0.0, 1.01], [0.0, math.nan, 0.5]])
    assert is_healthy(qpos, torch.zeros(4, 1), ant).tolist() == [True, True, False, False]


def test_costs_and_velocity_hand_computed():
    action = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    torch.testing.assert_close(control_cost(action, 0.1), torch.tensor([0.5, 0.025]))
    forces = torch.zeros(2, 2, 6)
    forces[0, 1, :2] = torch.tensor([3.0, -0.5])  # clipped to 1 and -0.5 -> 1.25
    forces[1, 1, 0] = 2000.0
    torch.testing.assert_close(contact_cost(forces, 5e-4, (-1.0, 1.0), (-math.inf, math.inf)),
                               torch.tensor([5e-4 * 1.25, 5e-4]))
    # Humanoid: unclipped forces, cost capped at 10 (2000**2 * 5e-6 = 20)
    torch.testing.assert_close(contact_cost(forces, 5e-6, (-math.inf, math.inf), (-math.inf, 10.0)),
                               torch.tensor([5e-6 * 9.25, 10.0]))
    torch.testing.assert_close(forward_velocity(torch.tensor([1.0]), torch.tensor([1.1]), 0.05), torch.tensor([2.0]))


def test_mass_center_hand_computed():
    mass = torch.tensor([0.0, 1.0, 3.0])
    xipos = torch.tensor([[[9.0, 9.0, 9.0], [0.0, 4.0, 1.0], [4.0, 0.0, 1.0]]])
    torch.testing.assert_close(mass_center_xy(mass, xipos), torch.tensor([[3.0, 1.0]]))


def test_render_is_not_blank():
    env = sim.make_env("ant", num_envs=2, seed=0)
    frame = env.render(1, width=80, height=60)
    assert frame.shape == (60, 80, 3) and frame.dtype == np.uint8 and frame.std() > 5.0
    env.close()
