"""SAC: learns the batched Pendulum within a tiny budget; temperature tuning; resume state."""

import copy

import pytest
import torch
from agent_loop import drive
from pendulum_vecenv import PendulumVecEnv, train_and_evaluate

from robot_rl.agents.base import EnvSpec
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.critics.ensemble import EnsembleCriticConfig

RANDOM_POLICY_RETURN = -1200.0  # measured order of magnitude; the threshold is far above it
THRESHOLD = -400.0


pytestmark = pytest.mark.usefixtures("one_thread")


def _agent(env, **kw) -> SAC:
    cfg = dict(batch_size=256, learning_starts=1000, utd_ratio=0.5, actor_hidden_dims=[64, 64],
               actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)
    cfg.update(kw)
    return SAC(SACConfig(**cfg), EnsembleCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))


@pytest.mark.slow
def test_sac_learns_pendulum():
    torch.manual_seed(0)
    env = PendulumVecEnv(8, seed=0)
    agent = _agent(env)
    ret = train_and_evaluate(agent, env, 1000, PendulumVecEnv(16, seed=1))
    assert agent.updates == 3504  # utd 0.5 x (8000 - 1000 warm-up) transitions, +4 at the threshold step
    assert ret > THRESHOLD, f"SAC mean return {ret:.0f} <= {THRESHOLD} after 8k transitions"
    assert 0.0 < agent.alpha.item() < 1.0  # the temperature was tuned down from 1


def test_bf16_updates_are_finite_and_move_every_parameter():
    torch.manual_seed(0)
    env = PendulumVecEnv(4, seed=0)
    agent = _agent(env, amp="bf16", learning_starts=64, batch_size=64, utd_ratio=1.0)
    before = {k: v.clone() for k, v in agent.state_dict()["critic"].items()}
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    _, metrics = drive(agent, env, 40)
    assert agent.updates == 4 * 40 - 64 + 4
    assert {"loss/critic_loss", "loss/actor", "loss/alpha"} <= metrics.keys()
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values()), metrics
    for k, v in agent.state_dict()["critic"].items():
        assert v.dtype == torch.float32 and not torch.equal(v, before[k]), k
    for p, p0 in zip(agent.actor.parameters(), actor_before, strict=True):
        assert p.dtype == torch.float32 and not torch.equal(p, p0)
    assert torch.isfinite(agent.log_alpha) and agent.alpha.item() < 1.0


@pytest.mark.slow
def test_sac_learns_pendulum_with_bf16_autocast():
    """``agent.amp=bf16``: same budget and threshold as the float32 test (~35 s, so marked slow)."""
    torch.manual_seed(0)
    env = PendulumVecEnv(8, seed=0)
    agent = _agent(env, amp="bf16")
    ret = train_and_evaluate(agent, env, 1000, PendulumVecEnv(16, seed=1))
    assert agent.updates == 3504
    assert ret > THRESHOLD, f"SAC (bf16) mean return {ret:.0f} <= {THRESHOLD} after 8k transitions"
    assert all(p.dtype == torch.float32 for p in [*agent.actor.parameters(), *agent.critic.parameters()])


@pytest.mark.parametrize(("capabilities", "amp", "warns"), [
    ({"cpu_name": "AMD EPYC", "avx2": True, "avx512_bf16": False, "amx_bf16": False}, "bf16", True),
    ({"cpu_name": "Xeon", "avx2": True, "avx512_bf16": True}, "bf16", False),
    ({"cpu_name": "Xeon", "amx_bf16": True}, "bf16", False),
    ({"architecture": "arm64", "bf16": True}, "bf16", False),
    ({"cpu_name": "AMD EPYC", "avx2": True}, "none", False),
])
def test_bf16_on_a_cpu_without_bf16_instructions_warns_with_the_fix(monkeypatch, recwarn, capabilities, amp, warns):
    """``agent.amp=bf16`` where torch would emulate bfloat16 (measured 8.4x slower) warns and names
    ``agent.amp=none``; a CPU with AVX512-BF16 / AMX / ARM BF16, or float32, does not warn."""
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    _agent(PendulumVecEnv(2, seed=0), amp=amp, learning_starts=64, batch_size=64)
    messages = [str(w.message) for w in recwarn if "agent.amp=bf16" in str(w.message)]
    if warns:
        assert len(messages) == 1 and "AMD EPYC" in messages[0] and "Fix: agent.amp=none" in messages[0], messages
    else:
        assert messages == []


def test_amp_mode_is_validated():
    with pytest.raises(ValueError, match=r"agent\.amp = 'fp16': must be one of \['none', 'bf16'\]"):
        SACConfig(amp="fp16")


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


def test_actor_and_alpha_step_matches_two_separate_backwards_and_leaves_critic_grads_alone():
    """One backward of ``actor_loss + alpha_loss`` restricted to actor and temperature gives each the gradient
    of its own loss (as two backwards with the critic frozen would) and never touches the critic's grads."""
    torch.manual_seed(0)
    env = PendulumVecEnv(4, seed=0)
    agent = _agent(env, learning_starts=1000, actor_hidden_dims=[16], init_alpha=0.5)
    drive(agent, env, 16)  # fills the buffer; no update before learning_starts
    obs = agent.sample_batch().obs["policy"]
    ref = copy.deepcopy(agent)
    sentinel = [torch.full_like(p, 7.0) for p in agent.critic.parameters()]
    for p, s in zip(agent.critic.parameters(), sentinel, strict=True):
        p.grad = s.clone()
    torch.manual_seed(1)
    metrics = agent._actor_and_alpha_step(obs, obs)

    torch.manual_seed(1)
    ref.critic.requires_grad_(False)
    action, log_prob = ref.actor.sample(obs)
    actor_loss = (ref.alpha * log_prob - ref.actor_q(obs, action)).mean()
    actor_loss.backward()
    alpha_loss = -(ref.log_alpha * (log_prob.detach() + ref.target_entropy)).mean()
    alpha_loss.backward()
    for p, q in zip(agent.actor.parameters(), ref.actor.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    torch.testing.assert_close(agent.log_alpha.grad, ref.log_alpha.grad)
    torch.testing.assert_close(metrics["loss/actor"], actor_loss.detach())
    torch.testing.assert_close(metrics["loss/alpha"], alpha_loss.detach())
    for p, s in zip(agent.critic.parameters(), sentinel, strict=True):
        assert torch.equal(p.grad, s)
    assert agent.alpha.item() != 0.5  # the temperature stepped
