"""TD3 and its degenerate DDPG setting: both learn the batched Pendulum; delayed actor updates."""

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv, train_and_evaluate

from robot_rl.agents.base import EnvSpec
from robot_rl.agents.td3 import TD3, TD3Config
from robot_rl.critics.ensemble import EnsembleCriticConfig
from robot_rl.errors import InputError

THRESHOLD = -400.0  # a random policy scores about -1200


pytestmark = pytest.mark.usefixtures("one_thread")


def _agent(env, ddpg: bool = False, **kw) -> TD3:
    cfg = dict(batch_size=256, learning_starts=1000, utd_ratio=0.5, actor_hidden_dims=[64, 64])
    if ddpg:
        cfg.update(policy_delay=1, target_policy_noise=0.0, target_reduce="mean", actor_reduce="mean")
    cfg.update(kw)
    members = 1 if ddpg else 2
    critic = EnsembleCriticConfig(hidden_dims=[64, 64], num_members=members, subset=members)
    return TD3(TD3Config(**cfg), critic, EnvSpec.from_env(env))


@pytest.mark.slow
def test_td3_learns_pendulum():
    torch.manual_seed(0)
    env = PendulumVecEnv(8, seed=0)
    agent = _agent(env, utd_ratio=1.0)
    ret = train_and_evaluate(agent, env, 1000, PendulumVecEnv(16, seed=1))
    assert ret > THRESHOLD, f"TD3 mean return {ret:.0f} <= {THRESHOLD} after 8k transitions"


@pytest.mark.slow
def test_ddpg_setting_learns_pendulum():
    torch.manual_seed(0)
    env = PendulumVecEnv(8, seed=0)
    agent = _agent(env, ddpg=True)
    ret = train_and_evaluate(agent, env, 1000, PendulumVecEnv(16, seed=1))
    assert ret > THRESHOLD, f"DDPG mean return {ret:.0f} <= {THRESHOLD} after 8k transitions"


def test_actor_and_targets_move_only_every_policy_delay_updates():
    torch.manual_seed(0)
    env = PendulumVecEnv(4)
    agent = _agent(env, learning_starts=8, utd_ratio=0.25, policy_delay=3)
    train_and_evaluate(agent, env, 2, PendulumVecEnv(1, max_episode_steps=1))
    snapshot = [p.detach().clone() for p in agent.actor.parameters()]
    target_snapshot = [p.detach().clone() for p in agent.actor_target.parameters()]
    for expect_actor_change in (False, False, True):  # updates 1 and 2 skip, update 3 steps the actor
        obs = env.reset()
        action = agent.act(obs)
        agent.observe(obs, action, env.step(action))
        assert agent.ready()
        agent.update()
        changed = any(not torch.equal(a, b) for a, b in zip(snapshot, agent.actor.parameters(), strict=True))
        target_changed = any(
            not torch.equal(a, b) for a, b in zip(target_snapshot, agent.actor_target.parameters(), strict=True)
        )
        assert changed == expect_actor_change == target_changed
    assert agent.updates == 4


def test_config_errors_name_the_key():
    with pytest.raises(InputError, match=r"agent\.policy_delay = 0: must be an integer >= 1"):
        TD3Config(policy_delay=0)
    with pytest.raises(InputError, match=r"agent\.target_noise_clip = -0.5: must be a finite number >= 0"):
        TD3Config(target_noise_clip=-0.5)
    with pytest.raises(ValueError, match=r"agent\.target_reduce = .*: must be one of"):
        TD3Config(target_reduce="max")
