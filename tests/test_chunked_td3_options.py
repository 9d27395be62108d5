"""chunked_td3 options: DQC's partial-chunk actor, AC3's intra-chunk returns and success-only actor updates."""

from types import SimpleNamespace

import pytest
import torch
from agent_loop import drive
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.chunked_td3 import ChunkedTD3Config
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.compose import compose
from robot_rl.critics.chunked import ChunkedCriticConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def _agent(env, H=3, partial=0, **kw):
    torch.manual_seed(0)
    settings = {"learning_starts": 800, "batch_size": 128, "actor_hidden_dims": [64, 64], "gamma": 0.9,
                "utd_ratio": 0.25, "buffer_size": 20000}
    cfg = ChunkedTD3Config(**{**settings, **kw})
    critic = ChunkedCriticConfig(chunk_len=H, partial_len=partial, hidden_dims=[64, 64])
    return make_agent(cfg, critic, EnvSpec.from_env(env))


def _success(agent) -> float:
    env = ToyReach(num_envs=256, seed=5)
    obs = env.reset(seed=123)
    for _ in range(env.max_episode_steps):
        step = env.step(agent.act(obs, deterministic=True))
        obs = step.obs
    return float(step.info["success"].float().mean())


def _collect(agent, env, steps):
    return drive(agent, env, steps)[1]


def _fake_step(t, done_env=None, success=False, terminated=False):
    """A hand-made ``sim.Step`` for 2 envs: critic obs ``[10 + t + 0.5, env]`` as the true next obs, reward
    ``t + 1``; ``done_env`` ends that env's episode (truncation unless ``terminated``)."""
    nxt = {"policy": torch.tensor([[t + 0.5, 0.0], [t + 0.5, 1.0]]),
           "critic": torch.tensor([[10 + t + 0.5, 0.0, 0, 0, 0], [10 + t + 0.5, 1.0, 0, 0, 0]])}
    end = torch.tensor([done_env == 0, done_env == 1])
    return SimpleNamespace(obs=nxt, reward=torch.full((2,), t + 1.0), terminated=end & terminated,
                           truncated=end & (not terminated),
                           info={"final_obs": nxt, "success": end & success})


def _fill(agent, ends):
    """Observe 5 hand-made steps; ``ends[t] = (env, success, terminated)`` or None."""
    for t in range(5):
        obs = {"policy": torch.tensor([[float(t), 0.0], [float(t), 1.0]]),
               "critic": torch.tensor([[10.0 + t, 0.0, 0, 0, 0], [10.0 + t, 1.0, 0, 0, 0]])}
        env, success, terminated = ends.get(t, (None, False, False))
        agent.observe(obs, torch.zeros(2, 2), _fake_step(t, env, success, terminated))


def test_intra_chunk_targets_average_the_executed_prefix_returns_by_hand():
    agent = _agent(ToyReach(num_envs=2), intra_chunk_returns=True, gamma=0.5)
    _fill(agent, {2: (0, False, True)})  # env 0 terminates at step 2
    agent.policy_value = lambda obs, target=False: obs["critic"][:, :1]  # V(s') = 10 + t + 0.5, by hand
    batch = agent.buffer.sample_chunks(300, 3, 0.5, generator=torch.Generator().manual_seed(0))
    target = agent.critic_target(batch)[:, 0]
    start, env = batch.obs["critic"][:, 0] - 10, batch.obs["critic"][:, 1]
    # y_k = sum_{j<k} 0.5^j r_{t+j} + 0.5^k V(s'_{t+k-1}) over executed prefixes, r_t = t + 1.
    expected = {
        (0, 0): (6.25 + 4.875 + 2.75) / 3,  # 1 + .5*10.5 | 1 + .5*2 + .25*11.5 | 1 + 1 + .25*3 (terminal)
        (1, 0): (7.75 + 3.5) / 2,  # 2 + .5*11.5 | 2 + .5*3 (terminal); the 3rd step is another episode
        (3, 0): (10.75 + 10.125) / 2,  # 4 + .5*13.5 | 4 + .5*5 + .25*14.5 (newest stored step)
        (0, 1): (6.25 + 4.875 + (1 + 1 + 0.75 + 0.125 * 12.5)) / 3,  # env 1 never ends
    }
    for (t, e), value in expected.items():
        rows = (start == t) & (env == e)
        assert rows.any(), (t, e)
        assert torch.allclose(target[rows], torch.tensor(value)), (t, e, target[rows][0].item(), value)


def test_success_only_actor_marks_successful_episodes_and_trains_only_on_them(tmp_path):
    agent = _agent(ToyReach(num_envs=2), success_only_actor=True, policy_delay=1)
    _fill(agent, {2: (0, True, False), 3: (1, False, True)})  # env 0 succeeds at step 2, env 1 fails at 3
    assert agent.succeeded[:5, 0].tolist() == [True, True, True, False, False]
    assert not agent.succeeded[:5, 1].any()
    batch = agent.buffer.sample_chunks(256, 3, 0.9, generator=torch.Generator().manual_seed(1))
    from_success = (batch.obs["critic"][:, 1] == 0) & (batch.obs["critic"][:, 0] <= 12)
    metrics = agent.learn(batch)
    assert metrics["train/success_states"] == pytest.approx(float(from_success.float().mean()))
    # A batch without successful states leaves the actor untouched (the critic still learns).
    failed = agent.buffer.sample_chunks(64, 3, 0.9, generator=torch.Generator().manual_seed(2))
    keep = failed.obs["critic"][:, 1] == 1
    for field in ("actions", "rewards", "terminated", "truncated", "rows", "env"):
        setattr(failed, field, getattr(failed, field)[keep])
    failed.obs = {g: v[keep] for g, v in failed.obs.items()}
    failed.next_obs = {g: v[keep] for g, v in failed.next_obs.items()}
    failed.target = type(failed.target)(*(getattr(failed.target, f)[keep] for f in
                                          ("returns", "discount", "last", "length", "valid")))
    before = [p.clone() for p in agent.actor.parameters()]
    metrics = agent.learn(failed)
    assert metrics["train/success_states"] == 0.0 and "loss/actor" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True))
    # The success labels travel with the buffer in checkpoints.
    clone = _agent(ToyReach(num_envs=2), success_only_actor=True)
    clone.load_state_dict(load_checkpoint(save_checkpoint(tmp_path, 1, agent.state_dict()))[1])
    assert torch.equal(clone.succeeded, agent.succeeded) and torch.equal(clone.episode_id, agent.episode_id)
    with pytest.raises(ValueError, match="success_only_actor"):
        agent._track_success(torch.zeros(2, dtype=torch.bool), {})


@pytest.mark.slow
def test_dqc_agent_acts_on_partial_chunks_bootstraps_with_the_partial_critic_and_learns_toy_reach():
    env = ToyReach(num_envs=16, seed=0)
    agent = _agent(env, H=4, partial=2, target_policy_noise=0.0)
    assert agent.actor(torch.zeros(3, 2)).shape == (3, 2, 2) and agent.executor.execute_len == 2
    calls = []
    agent.executor.act(torch.zeros(16, 2), lambda x: calls.append(len(x)) or torch.zeros(len(x), 2, 2))
    agent.executor.act(torch.zeros(16, 2), lambda x: calls.append(len(x)) or torch.zeros(len(x), 2, 2))
    assert calls == [16]  # a 2-action chunk is queried every 2 steps
    agent.executor.reset(torch.ones(16, dtype=torch.bool))
    before = _success(agent)
    metrics = _collect(agent, env, 500)
    after = _success(agent)
    print(f"DQC chunked_td3 (h=4, l=2) on ToyReach: success {before:.2f} -> {after:.2f}, metrics {metrics}")
    assert before < 0.2 and after >= 0.9
    assert "loss/distill_loss" in metrics
    batch = agent.buffer.sample_chunks(32, 4, agent.cfg.gamma, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        q_p = agent.critic.target_critic().partial_estimates(batch.next_obs["critic"],
                                                              agent.actor_target(batch.next_obs["policy"]))
    expected = batch.target.returns[:, None] + batch.target.discount[:, None] * q_p.min(0).values
    assert torch.allclose(agent.critic_target(batch), expected)
    with pytest.raises(ValueError, match="execute_len"):
        _agent(env, H=4, partial=2, execute_len=3)


def test_critic_report_traces_of_a_dqc_agent_score_its_partial_chunks_with_the_partial_critic():
    from robot_rl.diagnostics.value_traces import collect_traces

    env = ToyReach(num_envs=4)
    agent = _agent(env, H=4, partial=2)
    obs = env.reset(seed=0)
    expected = agent.critic.partial_estimates(obs["critic"], agent.actor(obs["policy"]))
    assert torch.equal(agent.critic_values(obs, agent.act(obs, deterministic=True)), expected)
    for execution in ("replan", "open_loop"):
        traces = collect_traces(agent, env, 4, 0.9, execution=execution)
        assert len(traces) == 4 and traces[0].values.shape[1:] == (2, 1)  # [T, E, G]


def test_agent_config_selects_the_chunked_critic_and_the_ac3_keys():
    cfg = compose(["agent=chunked_td3", "agent.success_only_actor=true", "agent.intra_chunk_returns=true"])
    assert isinstance(cfg.critic, ChunkedCriticConfig) and cfg.critic.partial_len == 0
    assert cfg.agent.success_only_actor and cfg.agent.intra_chunk_returns
