"""Chunked critics (Q-chunking, DQC) and chunked_td3 (chunk execution: tests/test_chunk_executor.py)."""

import pytest
import torch
from agent_loop import drive
from safetensors.torch import load_file, save_file
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.chunked_td3 import ChunkedTD3Config
from robot_rl.compose import compose
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.chunked import ChunkedCriticConfig, expectile_loss
from robot_rl.critics.multi import MultiCriticConfig
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.math.chunk_targets import chunk_return
from robot_rl.models.chunked_actor import ChunkedActor

pytestmark = pytest.mark.usefixtures("one_thread")


def test_expectile_loss_hand_values():
    diff = torch.tensor([2.0, -1.0])  # target - prediction
    # 0.9 * 4 + 0.1 * 1 = 3.7, mean 1.85
    assert expectile_loss(diff, 0.9).item() == pytest.approx(1.85)
    assert expectile_loss(diff, 0.5).item() == pytest.approx(0.5 * diff.pow(2).mean().item())
    with pytest.raises(ValueError, match="expectile"):
        expectile_loss(diff, 1.0)


def test_config_and_spec_errors_name_the_fix():
    with pytest.raises(ValueError, match="partial_len"):
        ChunkedCriticConfig(chunk_len=4, partial_len=4)
    critic = make_critic(ChunkedCriticConfig(chunk_len=4), CriticSpec(obs_dim=3, action_dim=2))
    assert critic(torch.zeros(5, 3), torch.zeros(5, 4, 2), reduce="none").shape == (2, 5, 1)
    with pytest.raises(ValueError, match=r"\[B, 4, 2\]"):
        critic(torch.zeros(5, 3), torch.zeros(5, 3, 2))


# --- a tiny deterministic task with known values --------------------------------------------------
# x' = clip(x + 0.25 a, -1, 1), r = -x'^2, gamma = 0.9. The evaluated policy plays chunks whose
# actions all equal -clamp(4 x, -1, 1) (x at the chunk's start), open loop.
H, GAMMA = 3, 0.9


def _step(x, a):
    x = (x + 0.25 * a).clamp(-1, 1)
    return x, -x.pow(2)


def _policy_chunk(x):
    return (-(4 * x).clamp(-1, 1)).unsqueeze(-1).expand(-1, H).unsqueeze(-1)  # [B, H, 1]


def _roll_chunk(x, chunk):
    rewards = []
    for k in range(H):
        x, r = _step(x, chunk[:, k, 0])
        rewards.append(r)
    return x, torch.stack(rewards, 1)


def _true_q(x, chunk, chunks_after=40):
    x, rewards = _roll_chunk(x, chunk)
    total = (rewards * GAMMA ** torch.arange(H)).sum(1)
    for i in range(chunks_after):
        x, rewards = _roll_chunk(x, _policy_chunk(x))
        total += GAMMA ** (H * (i + 1)) * (rewards * GAMMA ** torch.arange(H)).sum(1)
    return total


def _train_chunk_critic(cfg, steps=1500):
    torch.manual_seed(0)
    critic = make_critic(cfg, CriticSpec(obs_dim=1, action_dim=1))
    critic.target_critic()
    opt = torch.optim.Adam(critic.parameters(), lr=3e-3)
    for _ in range(steps):
        x = torch.rand(256) * 2 - 1
        chunk = torch.rand(256, H, 1) * 2 - 1
        x_next, rewards = _roll_chunk(x, chunk)
        none = torch.zeros_like(rewards, dtype=torch.bool)
        ret = chunk_return(rewards, none, none, GAMMA)
        with torch.no_grad():
            boot = critic(x_next[:, None], _policy_chunk(x_next), target=True)
        target = ret.returns[:, None] + ret.discount[:, None] * boot
        loss, _ = critic.loss(x[:, None], chunk, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        critic.update_target(0.05)
    return critic


def test_chunked_critic_learns_true_chunk_values_by_chunk_td():
    critic = _train_chunk_critic(ChunkedCriticConfig(chunk_len=H, hidden_dims=[64, 64]))
    torch.manual_seed(1)
    x = torch.rand(512) * 2 - 1
    chunk = torch.rand(512, H, 1) * 2 - 1
    truth = _true_q(x, chunk)
    pred = critic(x[:, None], chunk).squeeze(-1).detach()
    err = (pred - truth).abs().mean().item()
    print(f"chunk TD: mean |Q - Q_true| = {err:.3f} (|Q_true| mean {truth.abs().mean():.3f})")
    assert err < 0.1 * truth.abs().mean().item()


def test_dqc_partial_critic_distils_an_optimistic_expectile_of_completions():
    # The long critic is fitted to Q(s, a1, a2) = -(a1 - s)^2 - a2^2 directly; the partial critic on a1
    # alone must approach the 0.9-expectile over uniform a2 of -a2^2 shifted by -(a1 - s)^2.
    torch.manual_seed(0)
    cfg = ChunkedCriticConfig(chunk_len=2, partial_len=1, expectile=0.9, hidden_dims=[64, 64])
    critic = make_critic(cfg, CriticSpec(obs_dim=1, action_dim=1))
    opt = torch.optim.Adam(critic.parameters(), lr=3e-3)

    def q(s, chunk):
        return -(chunk[:, 0, 0] - s).pow(2) - chunk[:, 1, 0].pow(2)

    for _ in range(1500):
        s = torch.rand(256) * 2 - 1
        chunk = torch.rand(256, 2, 1) * 2 - 1
        loss, metrics = critic.loss(s[:, None], chunk, q(s, chunk)[:, None])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert "distill_loss" in metrics
    # The 0.9-expectile e of Y = -U^2, U ~ U[-1, 1]: solve 0.9 E[(Y-e)+] = 0.1 E[(e-Y)+] on samples.
    y = -(torch.rand(200_000) * 2 - 1).pow(2)
    lo, hi = -1.0, 0.0
    for _ in range(50):
        e = (lo + hi) / 2
        if 0.9 * (y - e).clamp(min=0).mean() > 0.1 * (e - y).clamp(min=0).mean():
            lo = e
        else:
            hi = e
    s = torch.linspace(-0.5, 0.5, 11)
    a1 = torch.linspace(-0.8, 0.8, 11)
    partial = critic.partial_estimates(s[:, None], a1[:, None, None]).mean(0).squeeze(-1).detach()
    expected = -(a1 - s).pow(2) + e
    err = (partial - expected).abs().max().item()
    print(f"DQC: 0.9-expectile of completions {e:.3f} (mean {y.mean():.3f}); max error {err:.3f}")
    assert err < 0.06
    assert bool((partial > -(a1 - s).pow(2) + y.mean() + 0.1).all())  # optimistic vs the mean completion


def test_chunked_critic_state_dict_round_trip_via_safetensors(tmp_path):
    cfg = ChunkedCriticConfig(chunk_len=3, partial_len=2, hidden_dims=[16])
    spec = CriticSpec(obs_dim=4, action_dim=2)
    a, b = make_critic(cfg, spec), make_critic(cfg, spec)
    a.update_target(1.0)
    save_file(a.state_dict(), tmp_path / "critic.safetensors")
    save_file(a.target_state_dict(), tmp_path / "target.safetensors")
    b.load_state_dict(load_file(tmp_path / "critic.safetensors"))
    b.load_target_state_dict(load_file(tmp_path / "target.safetensors"))
    obs, chunk = torch.randn(7, 4), torch.rand(7, 3, 2)
    assert torch.equal(a(obs, chunk, reduce="none"), b(obs, chunk, reduce="none"))
    assert torch.equal(a(obs, chunk, target=True), b(obs, chunk, target=True))
    assert torch.equal(a.partial_estimates(obs, chunk[:, :2]), b.partial_estimates(obs, chunk[:, :2]))


def test_chunked_actor_shapes_and_bounds():
    actor = ChunkedActor(obs_dim=4, action_dim=2, chunk_len=5, hidden_dims=[16])
    out = actor(torch.randn(3, 4) * 100)
    assert out.shape == (3, 5, 2) and bool((out.abs() <= 1).all())


def test_config_file_composes_to_the_typed_schema():
    cfg = compose(['agent=chunked_td3', 'critic=chunked', 'critic.partial_len=2'])
    assert isinstance(cfg.critic, ChunkedCriticConfig) and cfg.critic.chunk_len == 5 and cfg.critic.partial_len == 2
    assert isinstance(cfg.agent, ChunkedTD3Config) and cfg.agent.execution == "open_loop"


# --- the chunked agent ------------------------------------------------------------------------------


def _chunked_agent(env, H=3, **kw):
    torch.manual_seed(0)
    cfg = ChunkedTD3Config(learning_starts=800, batch_size=128, actor_hidden_dims=[64, 64], gamma=0.9,
                           utd_ratio=0.25, buffer_size=20000, **kw)
    return make_agent(cfg, ChunkedCriticConfig(chunk_len=H, hidden_dims=[64, 64]), EnvSpec.from_env(env))


def _toy_success(agent) -> float:
    env = ToyReach(num_envs=256, seed=5)
    obs = env.reset(seed=123)
    for _ in range(env.max_episode_steps):
        step = env.step(agent.act(obs, deterministic=True))
        obs = step.obs
    return float(step.info["success"].float().mean())


def _collect(agent, env, steps):
    return drive(agent, env, steps)[1]


@pytest.mark.slow
def test_chunked_td3_learns_toy_reach_with_open_loop_chunks():
    env = ToyReach(num_envs=16, seed=0)
    agent = _chunked_agent(env)
    before = _toy_success(agent)
    metrics = _collect(agent, env, 500)
    after = _toy_success(agent)
    print(f"chunked_td3 (h=3) on ToyReach: success {before:.2f} -> {after:.2f}, metrics {metrics}")
    assert before < 0.2 and after >= 0.9
    assert 0.0 < metrics["train/valid_chunks"] <= 1.0


def test_chunked_td3_round_trip_temporal_ensembling_and_export_without_critic():
    env = ToyReach(num_envs=4, seed=0)
    agent = _chunked_agent(env, execution="temporal_ensemble")
    _collect(agent, env, 260)  # past warm-up (800 transitions), a few updates
    assert agent.updates > 0
    clone = _chunked_agent(env, execution="temporal_ensemble")
    clone.load_state_dict(agent.state_dict())
    obs = {"policy": torch.randn(5, 2), "critic": torch.randn(5, 5)}
    assert torch.equal(clone.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert clone.buffer.size == agent.buffer.size and clone.updates == agent.updates
    policy = agent.policy()  # the whole chunk, step-major, with the execution collection used
    assert torch.equal(policy(obs["policy"]).reshape(5, 3, 2)[:, 0], agent.act(obs, deterministic=True))
    assert agent.policy_chunking() == (3, ChunkExecution("temporal_ensemble", 3, 0.01))
    assert sum(t.numel() for t in policy.state_dict().values()) < sum(p.numel() for p in agent.critic.parameters())
    with pytest.raises(ValueError, match="critic=chunked"):
        make_agent(ChunkedTD3Config(), MultiCriticConfig(), EnvSpec.from_env(env))
    with pytest.raises(ValueError, match="n_step"):
        ChunkedTD3Config(n_step=3)


def test_agents_read_the_horizon_from_the_critic_and_check_it_in_one_place():
    from robot_rl.agents.sac import SACConfig

    env = EnvSpec.from_env(ToyReach(num_envs=2))
    with pytest.raises(ValueError, match=r"cannot train critic=chunked.*single actions"):
        make_agent(SACConfig(actor_hidden_dims=[8]), ChunkedCriticConfig(chunk_len=3, hidden_dims=[8]), env)
    critic_cfg = ChunkedCriticConfig(chunk_len=4, partial_len=2, hidden_dims=[8], on_truncation="mask")
    agent = make_agent(ChunkedTD3Config(actor_hidden_dims=[8]), critic_cfg, env)
    assert (agent.critic.chunk_len, agent.actor_len, agent.critic.on_truncation) == (4, 2, "mask")
    assert agent.actor(torch.zeros(3, env.observation_dims["policy"])).shape == (3, 2, env.action_dim)
    plain = make_critic(ChunkedCriticConfig(chunk_len=4, hidden_dims=[8]), CriticSpec(obs_dim=3, action_dim=2))
    assert (plain.actor_len, plain.on_truncation, plain.subset) == (4, "bootstrap", 2)
