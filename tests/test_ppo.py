"""PPO: math helpers against hand-computed values, time-out bootstrapping, and a real learning check."""

import math
import os
import shutil

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.ppo import PPOConfig, _minibatches, adapt_learning_rate, gaussian_kl
from robot_rl.critics.mlp import MLPCriticConfig
from robot_rl.models.actor import GaussianActor, gaussian_entropy, gaussian_log_prob


def _agent(env: ToyReach, **cfg) -> object:
    torch.manual_seed(0)
    cfg = {"actor_hidden_dims": [64, 64], "num_steps_per_env": 16, **cfg}
    return make_agent(PPOConfig(**cfg), MLPCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))


def test_gaussian_kl_and_adaptive_lr_match_hand_values():
    one, zero = torch.ones(1, 1), torch.zeros(1, 1)
    torch.testing.assert_close(gaussian_kl(zero, one, one, one), torch.tensor([0.5]))  # (0-1)^2 / 2
    # KL(N(0,1) || N(0,2)) = ln 2 + 1/8 - 1/2
    torch.testing.assert_close(gaussian_kl(zero, one, zero, 2 * one), torch.tensor([math.log(2) - 0.375]))
    assert adapt_learning_rate(1e-3, kl=0.03, desired_kl=0.01) == pytest.approx(1e-3 / 1.5)
    assert adapt_learning_rate(1e-3, kl=0.004, desired_kl=0.01) == pytest.approx(1.5e-3)
    assert adapt_learning_rate(1e-3, kl=0.01, desired_kl=0.01) == 1e-3
    assert adapt_learning_rate(1e-2, kl=0.0, desired_kl=0.01) == 1e-2
    assert adapt_learning_rate(1e-5, kl=1.0, desired_kl=0.01) == 1e-5


def test_gaussian_log_prob_and_entropy_match_hand_values():
    # log N(1; 0, 2^2) = -1/8 - ln 2 - ln(2 pi)/2 ; two dims sum
    a, mu, std = torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2), torch.tensor([2.0, 1.0])
    hand = (-0.125 - math.log(2) - 0.5 * math.log(2 * math.pi)) + (-0.5 * math.log(2 * math.pi))
    torch.testing.assert_close(gaussian_log_prob(a, mu, std), torch.tensor([hand]))
    # H(N(., s^2)) = ln s + (1 + ln 2 pi) / 2 per dim
    torch.testing.assert_close(gaussian_entropy(std), torch.tensor(math.log(2) + 1 + math.log(2 * math.pi)))
    ref = torch.distributions.Normal(torch.randn(5, 3), torch.rand(3) + 0.1)
    x = ref.sample()
    torch.testing.assert_close(gaussian_log_prob(x, ref.mean, ref.stddev), ref.log_prob(x).sum(-1))


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_noise_std_parameterisation_sets_the_size_of_an_adam_step(std_type):
    """Adam's first step moves a parameter by lr against its gradient's sign: the scalar std then
    shrinks by lr (rsl_rl's default), the log std by a factor exp(-lr)."""
    actor = GaussianActor(3, 2, [8], init_std=0.3, std_type=std_type)
    torch.testing.assert_close(actor.std(), torch.full((2,), 0.3))
    opt = torch.optim.Adam([actor.std_param], lr=0.01)
    actor.std().sum().backward()  # d/dparam > 0 for both: the step lowers the std
    opt.step()
    expected = 0.3 - 0.01 if std_type == "scalar" else 0.3 * math.exp(-0.01)
    torch.testing.assert_close(actor.std().detach(), torch.full((2,), expected))
    with pytest.raises(ValueError, match="std_type='exp'"):
        GaussianActor(3, 2, [8], std_type="exp")


def test_rollout_policy_is_the_old_policy_and_normalisers_update_after_the_update():
    """Normalisers are frozen during a rollout, so the stored log-probabilities are exactly the
    current policy's until update() (ratio 1 at its first mini-batch); the update then folds the
    whole rollout (T * N observations) into both normalisers."""
    env = ToyReach(num_envs=8)
    agent = _agent(env)
    obs = env.reset(seed=3)
    for _ in range(16):
        a = agent.act(obs)
        step = env.step(a.clamp(-1, 1))
        agent.observe(obs, a, step)
        obs = step.obs
    s = agent.storage
    assert int(agent.actor.normalizer.count) == 0 and int(agent.critic.normalizer.count) == 0
    with torch.no_grad():
        mean, std = agent.actor.mean_std(s.obs.flatten(0, 1))
        log_prob = gaussian_log_prob(s.actions.flatten(0, 1), mean, std)
    torch.testing.assert_close(log_prob, s.log_prob.flatten(0, 1))
    torch.testing.assert_close(mean, s.mean.flatten(0, 1))
    obs_seen = s.obs.flatten(0, 1).clone()
    agent.update()
    assert int(agent.actor.normalizer.count) == 16 * 8 and int(agent.critic.normalizer.count) == 16 * 8
    torch.testing.assert_close(agent.actor.normalizer.mean, obs_seen.mean(0))


def test_asymmetric_critic_reads_the_critic_group():
    env = ToyReach(num_envs=4)
    agent = _agent(env)
    assert agent.critic.spec.obs_dim == 5 and agent.critic_group == "critic"
    assert agent.actor.net[0].in_features == 2


def test_truncated_envs_bootstrap_from_the_value_of_their_final_obs():
    env = ToyReach(num_envs=8, max_episode_steps=1)  # every step truncates
    agent = _agent(env)
    obs = env.reset(seed=1)
    action = agent.act(obs)
    step = env.step(torch.zeros_like(action))  # stay put: never terminates
    agent.observe(obs, action, step)
    assert bool(step.truncated.all()) and not bool(step.terminated.any())
    with torch.no_grad():
        expected = agent.critic(step.info["final_obs"]["critic"])
        post_reset = agent.critic(step.obs["critic"])
    torch.testing.assert_close(agent.storage.final_values[0], expected)
    assert not torch.allclose(expected, post_reset)  # the post-reset obs would give other values


def test_observe_requires_the_sampled_action():
    env = ToyReach(num_envs=4)
    agent = _agent(env)
    obs = env.reset()
    agent.act(obs)
    with pytest.raises(RuntimeError, match=r"PPO\.act"):
        agent.observe(obs, torch.zeros(4, 2), env.step(torch.zeros(4, 2)))


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"agent\.schedule = 'adaptiv': must be one of"):
        PPOConfig(schedule="adaptiv")
    with pytest.raises(ValueError, match=r"agent\.num_mini_batches"):
        PPOConfig(num_mini_batches=0)
    with pytest.raises(ValueError, match=r"agent\.noise_std_type = 'exp': must be one of"):
        PPOConfig(noise_std_type="exp")
    with pytest.raises(ValueError, match="group_weights"):
        _agent(ToyReach(num_envs=2), per_group_values=True, group_weights=[1.0])


def _evaluate(agent, env: ToyReach) -> float:
    """Deterministic success rate at the last step of one episode per env."""
    obs = env.reset(seed=123)
    for _ in range(env.max_episode_steps):
        step = env.step(agent.act(obs, deterministic=True).clamp(-1, 1))
        obs = step.obs
    return float(step.info["success"].float().mean())


@pytest.mark.parametrize("per_group", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_ppo_learns_toy_reach(per_group):
    env = ToyReach(num_envs=64, seed=0)
    agent = _agent(env, per_group_values=per_group, group_weights=[1.0, 0.5] if per_group else [])
    before = _evaluate(agent, ToyReach(num_envs=256, seed=5))
    obs = env.reset(seed=0)
    for _ in range(60 * 16):
        action = agent.act(obs)
        step = env.step(action.clamp(-1, 1))
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            metrics = agent.update()
    after = _evaluate(agent, ToyReach(num_envs=256, seed=5))
    assert math.isfinite(metrics["loss/value"]) and metrics["train/learning_rate"] > 0
    assert before < 0.2 and after >= 0.9, (before, after)


def test_state_dict_round_trip_reproduces_actions_and_optimizer():
    env = ToyReach(num_envs=8)
    agent = _agent(env)
    obs = env.reset()
    for _ in range(16):
        a = agent.act(obs)
        step = env.step(a.clamp(-1, 1))
        agent.observe(obs, a, step)
        obs = step.obs
    agent.update()
    clone = _agent(env)
    clone.load_state_dict(agent.state_dict())
    torch.testing.assert_close(clone.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert clone.updates == 1 and clone.learning_rate == agent.learning_rate
    exp_avg = clone.optimizer.state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(exp_avg, agent.optimizer.state_dict()["state"][0]["exp_avg"])


def _per_parameter(agent, optimizer: dict) -> dict:
    """``optimizer`` (a packed PPO's state) as PPO saved it before its parameters were packed: one entry each."""
    state, groups = {}, []
    for group, pack in zip(optimizer["param_groups"], agent._packs, strict=True):
        flat = optimizer["state"][group["params"][0]]
        ids = []
        for p, offset, size in zip(pack.params, pack.offsets, pack.sizes, strict=True):
            state[len(state)] = {k: v.clone() if v.dim() == 0 else v[offset:offset + size].view_as(p).clone()
                                 for k, v in flat.items()}
            ids.append(len(state) - 1)
        groups.append({**group, "params": ids})
    return {"state": state, "param_groups": groups}


def test_a_checkpoint_from_before_the_packing_resumes_alike():
    env = ToyReach(num_envs=8)
    agent = _agent(env)
    for seed in range(2):
        _collect(agent, env, 16, seed)
        agent.update()
    saved = agent.state_dict()
    old = {**saved, "optimizer": _per_parameter(agent, saved["optimizer"])}
    assert len(old["optimizer"]["param_groups"][0]["params"]) == len(list(agent.actor.parameters())) > 1
    resumed, packed = _agent(env), _agent(env)
    resumed.load_state_dict(old)
    packed.load_state_dict(saved)
    ours, theirs = resumed.optimizer.state_dict()["state"], saved["optimizer"]["state"]
    assert ours.keys() == theirs.keys() == {0, 1}
    assert all(torch.equal(ours[i][k], theirs[i][k]) for i in theirs for k in theirs[i])
    for clone in (resumed, packed):  # the same next update from the same rollout
        torch.manual_seed(1)
        _collect(clone, env, 16, seed=3)
        clone.update()
    for p, q in zip(resumed.actor.parameters(), packed.actor.parameters(), strict=True):
        assert torch.equal(p, q)


def test_minibatches_hold_each_sample_once_with_its_fields_together():
    B = 12
    rows = torch.arange(B, dtype=torch.float32)
    batch = {"obs": rows[:, None] * torch.ones(B, 3), "advantages": rows.clone(), "returns": rows[:, None] + 0.5,
             "odd": rows.long() % 2 == 1}  # a bool field, gathered on its own
    seen = []
    for mb in _minibatches(batch, 4, torch.device("cpu")):
        assert mb["obs"].shape == (3, 3) and mb["advantages"].shape == (3,) and mb["returns"].shape == (3, 1)
        assert torch.equal(mb["obs"][:, 0], mb["advantages"])
        assert torch.equal(mb["returns"][:, 0], mb["advantages"] + 0.5)
        assert torch.equal(mb["odd"], mb["advantages"].long() % 2 == 1) and list(mb) == list(batch)
        seen += mb["advantages"].tolist()
    assert sorted(seen) == rows.tolist()
    with pytest.raises(ValueError, match="num_mini_batches=13"):
        next(_minibatches(batch, 13, torch.device("cpu")))


def _collect(agent, env: ToyReach, steps: int, seed: int) -> None:
    """``steps`` vector steps of ``agent`` acting in ``env`` from a reset with ``seed``, observed."""
    obs = env.reset(seed=seed)
    for _ in range(steps):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs


@pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None,
                    reason="agent.compile_update needs a C++ compiler (g++) for torch.compile on CPU; none on PATH")
def test_compiled_update_matches_the_uncompiled_one():
    env = ToyReach(num_envs=8)
    torch.manual_seed(5)  # another compiled agent first: its compiled graph is reused with the next agent's weights
    other = make_agent(PPOConfig(actor_hidden_dims=[64, 64], num_steps_per_env=4, compile_update=True),
                       MLPCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))
    _collect(other, env, steps=4, seed=1)
    other.update()
    eager, fast = _agent(env, num_steps_per_env=4), _agent(env, num_steps_per_env=4, compile_update=True)
    fast.load_state_dict(eager.state_dict())
    obs = env.reset(seed=0)
    for _ in range(4):
        torch.manual_seed(1)
        action = eager.act(obs)
        torch.manual_seed(1)
        assert torch.equal(fast.act(obs), action)
        step = env.step(action)
        eager.observe(obs, action, step)
        fast.observe(obs, action, step)
        obs = step.obs
    torch.manual_seed(2)
    metrics = eager.update()
    torch.manual_seed(2)
    fast_metrics = fast.update()
    for key in ("loss/surrogate", "loss/value", "train/kl"):
        assert fast_metrics[key] == pytest.approx(metrics[key], rel=1e-4, abs=1e-6), key
    for p, q in zip(eager.actor.parameters(), fast.actor.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-6)


def test_compile_update_without_a_cxx_compiler_warns_and_runs_uncompiled(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.warns(UserWarning, match=r"agent.compile_update=true: .*'no-such-compiler-xyz' is not on PATH.*Fix"):
        agent = _agent(ToyReach(num_envs=4), compile_update=True)
    assert agent._loss_fn == agent._losses

