"""MPPI warm start (TD-MPC2): each training env's plan is shifted by one step into the next plan's
initial mean, and reset where that env's episode ended."""

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.mppi import MPPI, MPPIConfig, shift_plan
from robot_rl.agents.tdmpc import TDMPCConfig
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.world_model import WorldModelCriticConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def _critic_cfg():
    return WorldModelCriticConfig(latent_dim=16, hidden_dims=[32], num_q=2)


def _plan_cfg(**kw):
    return MPPIConfig(horizon=3, samples=32, elites=4, iterations=2, policy_samples=4, **kw)


def test_shift_plan_by_hand():
    mean = torch.tensor([[[1.0, -1.0], [2.0, -2.0], [3.0, -3.0]],
                         [[0.5, 0.5], [0.6, 0.6], [0.7, 0.7]]])  # [B=2, H=3, A=2]
    expected = torch.tensor([[[2.0, -2.0], [3.0, -3.0], [0.0, 0.0]],
                             [[0.6, 0.6], [0.7, 0.7], [0.0, 0.0]]])
    assert torch.equal(shift_plan(mean), expected)


def test_mppi_samples_around_its_warm_start():
    # With the sampling std pinned at 1e-3 every candidate lies within ~4e-3 of the initial mean, so the
    # refitted mean must stay at the warm start (and at zero without one), whatever the untrained model says.
    torch.manual_seed(0)
    critic = make_critic(_critic_cfg(), CriticSpec(obs_dim=2, action_dim=2))
    planner = MPPI(_plan_cfg(min_std=1e-3, max_std=1e-3), critic)
    obs = torch.randn(2, 2)
    warm = torch.tensor([[[0.5, -0.5], [0.2, 0.8], [-0.7, 0.1]],
                         [[-0.3, 0.3], [0.9, -0.9], [0.0, 0.4]]])
    mean, std = planner.plan_sequence(obs, warm_start=warm, generator=torch.Generator().manual_seed(1))
    assert mean.shape == std.shape == (2, 3, 2)
    assert (mean - warm).abs().max() < 5e-3
    cold, _ = planner.plan_sequence(obs, generator=torch.Generator().manual_seed(1))
    assert cold.abs().max() < 5e-3
    assert torch.allclose(planner.plan(obs, warm_start=warm, generator=torch.Generator().manual_seed(1)),
                          mean[:, 0])
    with pytest.raises(ValueError, match=r"warm_start must be \[B, plan horizon, A\]"):
        planner.plan_sequence(obs, warm_start=torch.zeros(2, 2, 2))


def test_tdmpc_shifts_each_envs_plan_and_resets_it_where_the_episode_ended(monkeypatch):
    torch.manual_seed(0)
    env = ToyReach(num_envs=2, seed=0, max_episode_steps=20)
    agent = make_agent(TDMPCConfig(learning_starts=0, act_with="plan", actor_hidden_dims=[32], plan=_plan_cfg()),
                       _critic_cfg(),
                       EnvSpec.from_env(env))
    calls: list[torch.Tensor | None] = []
    plan_sequence = agent.planner.plan_sequence

    def spy(*args, **kwargs):
        calls.append(kwargs.get("warm_start"))
        return plan_sequence(*args, **kwargs)

    monkeypatch.setattr(agent.planner, "plan_sequence", spy)
    obs = env.reset(seed=0)
    action = agent.act(obs)
    assert torch.equal(calls[0], torch.zeros(2, 3, 2))  # the first plan starts cold
    first = agent.plan_mean.clone()
    assert bool(first.abs().sum() > 0)

    env.t[1] = env.max_episode_steps - 1  # env 1 hits its time limit on this step, env 0 goes on
    step = env.step(action)
    assert step.truncated.tolist() == [False, True] and not step.terminated.any()
    agent.observe(obs, action, step)
    assert torch.equal(agent.plan_mean[0], first[0]) and torch.equal(agent.plan_mean[1], torch.zeros(3, 2))

    agent.act(step.obs)
    assert torch.equal(calls[1][0], shift_plan(first)[0])  # env 0: previous plan advanced one step
    assert torch.equal(calls[1][1], torch.zeros(3, 2))  # env 1: new episode, plans from scratch
    second = agent.plan_mean.clone()

    agent.act({"policy": torch.randn(5, 2)}, deterministic=True)  # evaluation: cold, memory untouched
    assert calls[2] is None and torch.equal(agent.plan_mean, second)
    with pytest.raises(ValueError, match="plans for the 2 training envs"):
        agent.act({"policy": torch.randn(5, 2)})
