"""PPO options beyond rsl_rl's: a fixed critic learning rate and reward scaling (hand values, state round trip)."""

import math

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.ppo import PPOConfig, RewardScaler
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.critics.mlp import MLPCriticConfig


def _agent(env: ToyReach, **cfg) -> object:
    torch.manual_seed(0)
    cfg = {"actor_hidden_dims": [32], "num_steps_per_env": 8, "num_mini_batches": 2, **cfg}
    return make_agent(PPOConfig(**cfg), MLPCriticConfig(hidden_dims=[32]), EnvSpec.from_env(env))


def _rollout(agent, env: ToyReach, obs=None):
    obs = env.reset(seed=0) if obs is None else obs
    while not agent.ready():
        action = agent.act(obs)
        step = env.step(action.clamp(-1, 1))
        agent.observe(obs, action, step)
        obs = step.obs
    return obs


@pytest.mark.parametrize("critic_lr", [None, 3e-4])
def test_adaptive_schedule_moves_the_critic_rate_only_when_shared(critic_lr):
    env = ToyReach(num_envs=8)
    # desired_kl so small that every mini-batch exceeds it: the actor's rate falls at each step
    agent = _agent(env, critic_learning_rate=critic_lr, desired_kl=1e-9, learning_rate=1e-3)
    _rollout(agent, env)
    agent.update()
    actor_group, critic_group = agent.optimizer.param_groups
    # 5 epochs x 2 mini-batches; the first sees KL 0 (the rollout policy itself), which keeps the rate
    assert agent.learning_rate == pytest.approx(1e-3 / 1.5 ** (5 * 2 - 1))
    assert actor_group["lr"] == agent.learning_rate
    assert critic_group["lr"] == (agent.learning_rate if critic_lr is None else critic_lr)
    assert critic_group["params"] == [agent._packs[1].flat]  # the critic's parameters, packed
    assert all(p.data_ptr() >= agent._packs[1].flat.data_ptr() for p in agent.critic.parameters())


def test_critic_learning_rate_must_be_positive():
    with pytest.raises(ValueError, match=r"agent\.critic_learning_rate = 0\.0: must be a finite number > 0"):
        PPOConfig(critic_learning_rate=0.0)


def test_reward_scaler_divides_by_the_std_of_the_discounted_return():
    """gamma 0.5, one env: rewards 1, 1, 1 (episode ends) then 2 -> tracked returns 1, 1.5, 1.75, 2."""
    scaler = RewardScaler(num_envs=1, groups=1, gamma=0.5, device=torch.device("cpu"))
    for r, done in ((1.0, False), (1.0, False), (1.0, True), (2.0, False)):
        scaler.track(torch.tensor([[r]]), torch.tensor([done]))
    returns = [1.0, 1.5, 1.75, 2.0]
    mean = sum(returns) / 4
    var = sum((x - mean) ** 2 for x in returns) / 4  # 0.171875
    scaled = scaler.scale(torch.tensor([[[1.0]], [[-2.0]]]))
    torch.testing.assert_close(scaled.flatten(), torch.tensor([1.0, -2.0]) / math.sqrt(var + 1e-8))
    assert int(scaler.stats.count) == 4 and scaler.running.item() == 2.0
    # nothing new tracked: the scale stays; huge rewards clip at +-10
    torch.testing.assert_close(scaler.scale(torch.tensor([[[100.0]]])), torch.tensor([[[10.0]]]))


def test_normalize_rewards_scales_the_rollout_and_survives_a_checkpoint(tmp_path):
    env = ToyReach(num_envs=8)
    agent = _agent(env, normalize_rewards=True)
    obs = _rollout(agent, env)
    raw = agent.storage.rewards.clone()
    agent.update()
    stats = agent.return_scale.stats
    assert int(stats.count) == 8 * 8 and float(stats.var) > 0
    # the tracked returns of this rollout set the scale: a reward-only rollout's std is not 1
    assert not torch.allclose(agent.return_scale.scale(raw), raw)
    _rollout(agent, env, obs)
    save_checkpoint(tmp_path, 1, agent.state_dict())
    _, state = load_checkpoint(tmp_path / "checkpoints" / "step_000000000001")
    clone = _agent(env, normalize_rewards=True)
    clone.load_state_dict(state)
    torch.testing.assert_close(clone.return_scale.stats.var, stats.var)
    assert int(clone.return_scale.stats.count) == 8 * 8 and float(clone.return_scale.running.abs().sum()) == 0.0


def test_update_threads_apply_during_the_update_only(monkeypatch) -> None:
    from robot_rl.agents import base

    seen = []
    torch.set_num_threads(1)
    with base.intra_op_threads(2):
        seen.append(torch.get_num_threads())
    with base.intra_op_threads(0):  # 0: left alone
        seen.append(torch.get_num_threads())
    assert seen == [2, 1] and torch.get_num_threads() == 1
    with pytest.raises(RuntimeError), base.intra_op_threads(2):
        raise RuntimeError("restored anyway")
    assert torch.get_num_threads() == 1


def test_ppo_update_runs_its_gradient_steps_at_update_threads() -> None:
    env = ToyReach(num_envs=8)
    agent = _agent(env, update_threads=2)
    _rollout(agent, env)
    torch.set_num_threads(1)
    seen, step = [], agent._step
    agent._step = lambda mb, std: (seen.append(torch.get_num_threads()), step(mb, std))[1]
    agent.update()
    assert seen == [2] * 10 and torch.get_num_threads() == 1  # 5 epochs x 2 mini-batches; restored after
    with pytest.raises(Exception, match="update_threads"):
        PPOConfig(update_threads=-1)


def _threads_in_update_threads_2(_: int) -> int:
    from robot_rl.agents import base

    with base.intra_op_threads(2):
        return torch.get_num_threads()


def test_a_forked_process_keeps_its_thread_count() -> None:
    # GNU OpenMP's pool does not survive a fork: a forked child asking for 2 threads after its parent used 2
    # hung (tests/test_distributed.py's forked ranks did, 600 s); the child must stay at its count instead
    import multiprocessing

    from robot_rl.agents import base

    torch.set_num_threads(1)
    with base.intra_op_threads(2):
        torch.ones(256, 256) @ torch.ones(256, 256)  # the parent's pool at 2 threads
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(_threads_in_update_threads_2, [0], chunksize=1) == [1]
