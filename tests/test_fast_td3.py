"""FastTD3-style agent: learns the batched Pendulum with many envs; per-env noise; C51 target choice."""

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv, train_and_evaluate

from robot_rl.agents.base import EnvSpec
from robot_rl.agents.fast_td3 import FastTD3, FastTD3Config
from robot_rl.critics.distributional import C51CriticConfig
from robot_rl.critics.ensemble import EnsembleCriticConfig
from robot_rl.data.replay_buffer import ReplayBatch
from robot_rl.errors import InputError

THRESHOLD = -400.0  # a random policy scores about -1200


pytestmark = pytest.mark.usefixtures("one_thread")


def _agent(env, **kw) -> FastTD3:
    cfg = dict(batch_size=1024, learning_starts=1000, utd_ratio=0.1, actor_hidden_dims=[64, 64],
               actor_lr=1e-3, critic_lr=1e-3, weight_decay=0.0, tau=0.01, policy_delay=2)
    cfg.update(kw)
    critic = C51CriticConfig(num_atoms=51, v_min=-1600, v_max=0, hidden_dims=[64, 64])
    return FastTD3(FastTD3Config(**cfg), critic, EnvSpec.from_env(env))


@pytest.mark.slow
def test_fast_td3_learns_pendulum_with_many_envs():
    torch.manual_seed(0)
    env = PendulumVecEnv(32, seed=0)
    agent = _agent(env)
    ret = train_and_evaluate(agent, env, 300, PendulumVecEnv(16, seed=1))
    assert agent.updates == 860  # utd 0.1 x (9600 - 1000 warm-up) transitions, 3-step returns
    assert ret > THRESHOLD, f"FastTD3 mean return {ret:.0f} <= {THRESHOLD} after 9.6k transitions"


def test_exploration_noise_is_per_env_and_redrawn_at_episode_end():
    torch.manual_seed(0)
    env = PendulumVecEnv(64, max_episode_steps=2)
    agent = _agent(env, learning_starts=0, std_min=0.1, std_max=0.3)
    std = agent.noise_std.clone()
    assert std.shape == (64, 1) and std.min() >= 0.1 and std.max() <= 0.3 and std.std() > 0.03
    obs = env.reset()
    action = agent.act(obs)
    agent.observe(obs, action, env.step(action))
    assert torch.equal(agent.noise_std, std)  # no episode ended
    action = agent.act(obs)
    agent.observe(obs, action, env.step(action))  # every episode truncates at step 2
    assert (agent.noise_std != std).all()


def test_target_is_the_projection_of_the_lower_valued_target_critic():
    torch.manual_seed(0)
    agent = _agent(PendulumVecEnv(2))
    obs = {"policy": torch.randn(5, 3)}
    batch = ReplayBatch(obs, torch.zeros(5, 1), torch.full((5,), -3.0), obs, torch.full((5,), 0.9))
    next_action = torch.zeros(5, 1)
    target = agent.critic_target(batch, next_action)
    probs = agent.critic.target_critic().distribution(obs["policy"], next_action).softmax(-1)  # [2, 5, 1, K]
    values = (probs * agent.critic.support).sum(-1)[:, :, 0]
    for b in range(5):
        lower = int(values[:, b].argmin())
        expected = agent.critic.project(probs[lower, b : b + 1], torch.tensor([[-3.0]]), torch.tensor([0.9]))
        torch.testing.assert_close(target[b], expected[0])
    torch.testing.assert_close(target.sum(-1), torch.ones(5, 1))


def test_fast_td3_refuses_a_non_categorical_critic():
    with pytest.raises(ValueError, match=r"agent=fast_td3 cannot train critic=ensemble .*needs critic=c51.*out"):
        FastTD3(FastTD3Config(), EnsembleCriticConfig(hidden_dims=[8]), EnvSpec.from_env(PendulumVecEnv(2)))


def test_config_errors_name_the_key():
    with pytest.raises(InputError, match=r"agent\.std_max = 0.1: must be >= agent\.std_min = 0.5"):
        FastTD3Config(std_min=0.5, std_max=0.1)
    with pytest.raises(InputError, match=r"agent\.std_min = -0.1: must be a finite number >= 0"):
        FastTD3Config(std_min=-0.1)
