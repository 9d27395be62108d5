"""Contract tests every registered task passes (DESIGN.md, contract 1).

Shapes, dtypes and device; auto-reset with ``final_obs``; truncation vs termination; determinism
under a seed; reward terms sum to the reward and regroup into ``reward_by_group``; success flags.
"""

from __future__ import annotations

import pytest
import torch

import sim

NUM_ENVS = 3
TASKS = [t for t in sim.list_tasks() if not t.startswith("gym:")]


def _short(task: str, num_envs: int = NUM_ENVS, seed: int = 0) -> sim.VecEnv:
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    return env


def _random_actions(env: sim.VecEnv, steps: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    span = (env.action_high - env.action_low).cpu()
    return [env.action_low.cpu() + span * torch.rand(env.num_envs, env.action_dim, generator=g) for _ in range(steps)]


@pytest.fixture(scope="module", params=TASKS)
def env(request):
    environment = _short(request.param)
    yield environment
    environment.close()


def test_attributes_and_reset_shapes(env):
    assert env.num_envs == NUM_ENVS
    assert env.dt > 0 and env.max_episode_steps >= 1
    assert env.action_low.shape == env.action_high.shape == (env.action_dim,)
    assert torch.all(env.action_low < env.action_high)
    assert "policy" in env.observation_dims
    assert len(env.reward_groups) >= 1
    obs = env.reset(seed=0)
    assert set(obs) == set(env.observation_dims)
    for group, value in obs.items():
        assert value.shape == (NUM_ENVS, env.observation_dims[group]), group
        assert value.dtype == torch.float32 and value.device == env.device
        assert torch.isfinite(value).all(), group


def test_step_types_and_reward_terms(env):
    env.reset(seed=1)
    for action in _random_actions(env, 5, seed=1):
        step = env.step(action)
        assert step.reward.shape == (NUM_ENVS,) and step.reward.dtype == torch.float32
        assert step.terminated.dtype == torch.bool and step.truncated.dtype == torch.bool
        assert not torch.any(step.terminated & step.truncated)
        info = step.info
        assert {"final_obs", "reward_terms", "reward_by_group", "log"} <= set(info)
        total = torch.stack(list(info["reward_terms"].values())).sum(0)
        torch.testing.assert_close(total, step.reward, rtol=1e-5, atol=1e-5)
        assert info["reward_by_group"].shape == (NUM_ENVS, len(env.reward_groups))
        torch.testing.assert_close(info["reward_by_group"].sum(1), step.reward, rtol=1e-5, atol=1e-5)
        if "success" in info:
            assert info["success"].shape == (NUM_ENVS,) and info["success"].dtype == torch.bool
        for group, value in info["final_obs"].items():
            assert value.shape == (NUM_ENVS, env.observation_dims[group])


def test_time_limit_is_truncation_with_final_obs():
    """Run so101_reach to its time limit with zero actions: every env truncates, none terminates."""
    env = sim.make_env("so101_reach", num_envs=2, seed=0, episode_s=0.4)
    obs = env.reset(seed=0)
    zero = torch.zeros(2, env.action_dim)
    for _ in range(env.max_episode_steps - 1):
        step = env.step(zero)
        assert not step.done.any()
        last_obs = step.obs
    step = env.step(zero)
    assert step.truncated.all() and not step.terminated.any()
    assert step.info["log"]["episode/length"] == env.max_episode_steps
    # final_obs is the pre-reset observation: it continues the trajectory, the new obs does not.
    final = step.info["final_obs"]["policy"]
    assert torch.allclose(final[:, :6], last_obs["policy"][:, :6], atol=0.05)
    assert not torch.allclose(final, step.obs["policy"])
    assert torch.allclose(step.obs["policy"][:, -env.action_dim:], torch.zeros(2, env.action_dim))
    del obs


def test_envs_that_do_not_reset_keep_their_final_obs_when_another_env_resets():
    """With observation noise on, env 1's next obs equals its final_obs exactly while env 0 resets."""
    env = sim.make_env("so101_reach", num_envs=2, seed=0)
    assert env._policy_noise is not None  # the case that matters: noise is drawn per observation
    env.reset(seed=0)
    zero = torch.zeros(2, env.action_dim)
    for _ in range(3):
        env.step(zero)
    env.episode_step[0] = env.max_episode_steps - 1  # env 0 hits its time limit on the next step, env 1 does not
    step = env.step(zero)
    assert step.truncated.tolist() == [True, False] and not step.terminated.any()
    final = step.info["final_obs"]
    for group in final:
        assert torch.equal(step.obs[group][1], final[group][1])
    assert not torch.allclose(step.obs["policy"][0], final["policy"][0])


@pytest.mark.parametrize("task", TASKS)
def test_deterministic_under_seed(task):
    runs = []
    for _ in range(2):
        env = _short(task, num_envs=2, seed=7)
        obs = [env.reset(seed=7)["policy"]]
        for action in _random_actions(env, 4, seed=3):
            step = env.step(action)
            obs.append(step.obs["policy"])
            obs.append(step.reward[:, None])
        runs.append(torch.cat(obs, dim=1))
        env.close()
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)
    other = _short(task, num_envs=2, seed=7).reset(seed=8)["policy"]
    assert not torch.equal(other, runs[0][:, : other.shape[1]])


def test_success_flag_so101_reach():
    """Teleport the gripper onto the target by choosing the target: success must be reported."""
    env = sim.make_env("so101_reach", num_envs=2, seed=0)
    env.reset(seed=0)
    step = env.step(torch.zeros(2, env.action_dim))
    ee = env.state.site("end_effector")
    env.target[:] = ee
    env.target[1, 2] += 0.1  # env 1 stays 10 cm away
    step = env.step(torch.zeros(2, env.action_dim))
    assert step.info["success"].tolist() == [True, False]


def test_bad_action_shape_is_refused():
    env = sim.make_env("so101_reach", num_envs=2)
    env.reset()
    with pytest.raises(ValueError, match="expected"):
        env.step(torch.zeros(3, env.action_dim))


def test_unknown_task_and_setting_are_refused():
    with pytest.raises(KeyError, match="known tasks"):
        sim.make_env("so101_reech")
    with pytest.raises(ValueError, match="no setting 'succes_radius'"):
        sim.make_env("so101_reach", succes_radius=0.1)
