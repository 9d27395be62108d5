"""SAC: learns the batched Pendulum within a tiny budget; temperature tuning; resume state."""

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv, train_and_evaluate

from robot_rl.agents.base import EnvSpec
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.critics.ensemble import EnsembleCriticConfig

RANDOM_POLICY_RETURN = -1200.0  # measured order of magnitude; the threshold is far above it
THRESHOLD = -400.0


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny networks on a shared 2-core machine: one intra-op thread is faster and fairer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _agent(env, **kw) -> SAC:
    cfg = dict(batch_size=256, learning_starts=1000, utd_ratio=0.5, actor_hidden_dims=[64, 64],
               actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)
    cfg.update(kw)
    return SAC(SACConfig(**cfg), EnsembleCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))


def test_sac_learns_pendulum():
    torch.manual_seed(0)
    env = PendulumVecEnv(8, seed=0)
    agent = _agent(env)
    ret = train_and_evaluate(agent, env, 1000, PendulumVecEnv(16, seed=1))
    assert agent.updates == 3504  # utd 0.5 x (8000 - 1000 warm-up) transitions, +4 at the threshold step
    assert ret > THRESHOLD, f"SAC mean return {ret:.0f} <= {THRESHOLD} after 8k transitions"
    assert 0.0 < agent.alpha.item() < 1.0  # the temperature was tuned down from 1


def test_sac_state_dict_round_trip_restores_actions_counters_and_buffer():
    torch.manual_seed(0)
    env = PendulumVecEnv(4)
    agent = _agent(env, learning_starts=40)
    train_and_evaluate(agent, env, 30, PendulumVecEnv(2))
    state = agent.state_dict()
    fresh = _agent(PendulumVecEnv(4), learning_starts=40)
    fresh.load_state_dict(state)
    obs = torch.randn(5, 3)
    torch.testing.assert_close(fresh.act({"policy": obs}, deterministic=True), agent.act({"policy": obs}, True))
    assert (fresh.env_steps, fresh.updates, fresh.update_credit) == (agent.env_steps, agent.updates,
                                                                      agent.update_credit)
    assert fresh.buffer.size == agent.buffer.size == 30
    torch.testing.assert_close(fresh.buffer.reward, agent.buffer.reward)
    torch.testing.assert_close(fresh.alpha, agent.alpha)
    policy = agent.policy()
    torch.testing.assert_close(policy(obs), agent.act({"policy": obs}, deterministic=True))
