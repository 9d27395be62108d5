"""GymVecEnvAdapter: gymnasium envs behind the VecEnv contract, checked against gymnasium itself."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import sim
from sim.gym_adapter import GymVecEnvAdapter


def test_make_env_prefix_matches_gymnasium_step_for_step():
    env = sim.make_env("gym:Pendulum-v1", num_envs=4, seed=10)
    assert isinstance(env, GymVecEnvAdapter)
    assert (env.num_envs, env.action_dim, env.observation_dims, env.max_episode_steps) == (4, 1, {"policy": 3}, 200)
    assert env.dt == pytest.approx(0.05) and env.reward_groups == ("task",)
    assert env.action_low.tolist() == [-2.0] and env.action_high.tolist() == [2.0]
    reference = [gym.make("Pendulum-v1") for _ in range(4)]
    expected = np.stack([r.reset(seed=10 + i)[0] for i, r in enumerate(reference)])
    obs = env.reset(seed=10)
    assert obs["policy"].dtype == torch.float32
    np.testing.assert_allclose(obs["policy"].numpy(), expected, rtol=1e-6)
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        action = 6.0 * torch.rand(4, 1, generator=g) - 3.0  # some outside [-2, 2]: clipped like the reference
        step = env.step(action)
        for i, r in enumerate(reference):
            o, rew, *_ = r.step(np.clip(action[i].double().numpy(), -2.0, 2.0).astype(np.float32))
            np.testing.assert_allclose(step.obs["policy"][i].numpy(), o, rtol=1e-6, atol=1e-6)
            assert step.reward[i].item() == pytest.approx(rew, rel=1e-6, abs=1e-6)
        torch.testing.assert_close(step.info["reward_terms"]["reward"], step.reward)
        torch.testing.assert_close(step.info["reward_by_group"][:, 0], step.reward)


def test_truncation_keeps_final_obs_and_resets():
    env = sim.make_env("gym:Pendulum-v1", num_envs=2, seed=0, max_episode_steps=3)
    assert env.max_episode_steps == 3
    reference = gym.make("Pendulum-v1", max_episode_steps=3)
    reference.reset(seed=0)
    zero = torch.zeros(2, 1)
    for _ in range(2):
        assert not env.step(zero).done.any()
        reference.step(np.zeros(1, dtype=np.float32))
    step = env.step(zero)
    final_ref, _, term_ref, trunc_ref, _ = reference.step(np.zeros(1, dtype=np.float32))
    assert trunc_ref and not term_ref
    assert step.truncated.all() and not step.terminated.any()
    np.testing.assert_allclose(step.info["final_obs"]["policy"][0].numpy(), final_ref, rtol=1e-6, atol=1e-6)
    assert not torch.equal(step.obs["policy"], step.info["final_obs"]["policy"])
    assert step.info["log"]["episode/length"] == 3.0
    assert not env.step(zero).done.any()  # the counters restarted with the new episode


def test_discrete_termination_is_not_truncation():
    env = sim.make_env("gym:CartPole-v1", num_envs=1, seed=0)
    assert env.action_dim == 1 and env.action_low.tolist() == [0.0] and env.action_high.tolist() == [1.0]
    push = torch.full((1, 1), 0.9)  # rounds to action 1: push right until the pole falls
    length = 0
    while length < 100:
        step = env.step(push)
        length += 1
        if step.done.any():
            break
    assert step.terminated.all() and not step.truncated.any()
    final = step.info["final_obs"]["policy"][0]
    assert final[2].abs() > 0.2094 or final[0].abs() > 2.4  # CartPole's failure bounds
    assert step.info["log"]["episode/length"] == float(length)
    assert (step.obs["policy"].abs() <= 0.05).all()  # fresh reset state of CartPole


def test_thunks_need_a_time_limit():
    def thunk() -> gym.Env:
        return gym.make("Pendulum-v1").unwrapped

    with pytest.raises(ValueError, match="max_episode_steps"):
        GymVecEnvAdapter([thunk, thunk])
    env = GymVecEnvAdapter([thunk, thunk], max_episode_steps=2, seed=1)
    assert env.num_envs == 2 and env.max_episode_steps == 2
    env.step(torch.zeros(2, 1))
    assert env.step(torch.zeros(2, 1)).truncated.all()


class _MultiBinaryActions(gym.ActionWrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.action_space = spaces.MultiBinary(2)

    def action(self, action: np.ndarray) -> np.ndarray:
        return np.zeros(1, dtype=np.float32)


def test_structured_observations_are_flattened():
    env = sim.make_env("gym:Blackjack-v1", num_envs=2, seed=0, max_episode_steps=10)
    assert env.observation_dims == {"policy": 32 + 11 + 2}  # Tuple(Discrete(32), Discrete(11), Discrete(2)) one-hot
    obs = env.reset(seed=0)["policy"]
    assert obs.sum(dim=1).tolist() == [3.0, 3.0]


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="num_envs=3 but 2 env thunks"):
        GymVecEnvAdapter([lambda: gym.make("Pendulum-v1")] * 2, num_envs=3)
    with pytest.raises(ValueError, match="need a gymnasium id"):
        GymVecEnvAdapter([lambda: gym.make("Pendulum-v1")], g=9.0)
    with pytest.raises(ValueError, match="is not supported"):
        GymVecEnvAdapter([lambda: _MultiBinaryActions(gym.make("Pendulum-v1"))])
    env = sim.make_env("gym:Pendulum-v1", num_envs=2)
    with pytest.raises(ValueError, match=r"expected \(2, 1\)"):
        env.step(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="nthread=4"):
        sim.make_env("gym:Pendulum-v1", nthread=4)
    assert sim.make_env("gym:Pendulum-v1", nthread=0).num_envs == 1  # what `robot-rl sim` passes
    with pytest.raises(KeyError, match="gym:<gymnasium id>"):
        sim.make_env("no_such_task")


class _GoalEnv(gym.Env):
    """One-step episodes whose info says ``is_success`` (as Gymnasium-Robotics' goal envs do)."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    def __init__(self) -> None:
        self.metadata = {"render_fps": 10}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {"is_success": bool(action[0] > 0)}


def test_success_is_reported_once_the_env_gives_is_success():
    plain = sim.make_env("gym:Pendulum-v1", num_envs=1, seed=0)
    plain.step(torch.zeros(1, 1))
    assert plain.has_success is False  # Pendulum reports no is_success: evaluation shows no success rate
    goal = GymVecEnvAdapter([_GoalEnv], max_episode_steps=5)
    assert goal.has_success is False
    step = goal.step(torch.ones(1, 1))
    assert goal.has_success is True and step.info["success"].tolist() == [True]
