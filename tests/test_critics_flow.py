"""Flow-matching critic (floq): Euler read-out by hand, learning true values by TD, SAC integration,
save/load, and a policy export without the critic."""

import pytest
import torch
from agent_loop import drive
from safetensors.torch import load_file, save_file
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.sac import SACConfig
from robot_rl.compose import compose
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.flow import FlowCriticConfig, euler_integrate, time_features

GAMMA = 0.9


pytestmark = pytest.mark.usefixtures("one_thread")


def test_euler_integration_by_hand():
    z0 = torch.tensor([1.0, -2.0])
    # constant velocity 3: z(1) = z0 + 3 for any step count
    torch.testing.assert_close(euler_integrate(lambda z, t: torch.full_like(z, 3.0), z0, 4), z0 + 3)
    # dz/dt = z with 2 steps: z0 * (1 + 1/2)^2 = 2.25 z0
    torch.testing.assert_close(euler_integrate(lambda z, t: z, z0, 2), 2.25 * z0)
    # dz/dt = t with 2 steps: 0.5 * 0 + 0.5 * 0.5 = 0.25
    torch.testing.assert_close(euler_integrate(lambda z, t: t, torch.zeros(1), 2), torch.tensor([0.25]))
    with pytest.raises(ValueError, match="num_steps"):
        euler_integrate(lambda z, t: z, z0, 0)
    feats = time_features(torch.tensor([[0.25]]), 2)  # t, sin(pi t), sin(2 pi t), cos(pi t), cos(2 pi t)
    torch.testing.assert_close(feats, torch.tensor([[0.25, 2**-0.5, 1.0, 2**-0.5, 0.0]]), atol=1e-6, rtol=0)


def _step(x, a):
    x = (x + 0.25 * a).clamp(-1, 1)
    return x, -x.pow(2)


def _pi(x):
    return -(4 * x).clamp(-1, 1)


def _true_q(x, a, steps=60):
    x, total = _step(x, a)
    for k in range(1, steps):
        x, r = _step(x, _pi(x))
        total = total + GAMMA**k * r
    return total


@pytest.mark.slow
def test_flow_critic_learns_true_q_values_by_td_flow_matching():
    torch.manual_seed(0)
    critic = make_critic(FlowCriticConfig(hidden_dims=[64, 64], num_steps=4), CriticSpec(obs_dim=1, action_dim=1))
    critic.target_critic()
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    for _ in range(2000):
        x, a = torch.rand(256) * 2 - 1, torch.rand(256) * 2 - 1
        x_next, r = _step(x, a)
        with torch.no_grad():
            target = r[:, None] + GAMMA * critic(x_next[:, None], _pi(x_next)[:, None], target=True)
        loss, _ = critic.loss(x[:, None], a[:, None], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        critic.update_target(0.02)
    torch.manual_seed(1)
    x, a = torch.rand(512) * 2 - 1, torch.rand(512) * 2 - 1
    truth = _true_q(x, a)
    pred = critic(x[:, None], a[:, None]).squeeze(-1).detach()
    err = (pred - truth).abs().mean().item()
    print(f"flow critic: mean |Q - Q_true| = {err:.3f} (mean |Q_true| {truth.abs().mean():.3f})")
    assert err < 0.15 * truth.abs().mean().item()


def test_sac_trains_with_the_flow_critic_and_exports_no_critic(tmp_path):
    torch.manual_seed(0)
    env = ToyReach(num_envs=8, seed=0)
    cfg = SACConfig(learning_starts=64, batch_size=32, actor_hidden_dims=[32], buffer_size=2000)
    agent = make_agent(cfg, FlowCriticConfig(hidden_dims=[32], num_steps=2), EnvSpec.from_env(env))
    _, metrics = drive(agent, env, 16)
    assert "loss/critic_loss" in metrics and torch.isfinite(torch.as_tensor(metrics["loss/critic_loss"]))
    policy_tensors = agent.policy().state_dict()
    assert not any("field" in name for name in policy_tensors)
    critic_numel = sum(p.numel() for p in agent.critic.parameters())
    assert sum(t.numel() for t in policy_tensors.values()) < critic_numel


def test_flow_critic_round_trip_via_safetensors(tmp_path):
    spec = CriticSpec(obs_dim=3, action_dim=2, num_values=2)
    cfg = FlowCriticConfig(hidden_dims=[16], num_steps=3)
    a, b = make_critic(cfg, spec), make_critic(cfg, spec)
    a.update_target(1.0)
    save_file(a.state_dict(), tmp_path / "flow.safetensors")
    b.load_state_dict(load_file(tmp_path / "flow.safetensors"))
    b.load_target_state_dict(a.target_state_dict())
    obs, act = torch.randn(4, 3), torch.rand(4, 2)
    assert a(obs, act, reduce="none").shape == (2, 4, 2)
    assert torch.equal(a(obs, act, reduce="none"), b(obs, act, reduce="none"))
    assert torch.equal(a(obs, act, target=True), b(obs, act, target=True))


def test_config_file_composes_to_the_typed_schema():
    cfg = compose(['critic=flow'])
    assert isinstance(cfg.critic, FlowCriticConfig) and cfg.critic.num_steps == 8
