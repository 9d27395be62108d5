"""World-model critic: joint losses decrease on a deterministic toy system, values are learnt, MPPI plans,
the V variant runs inside PPO, and state round-trips through safetensors."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.mppi import MPPI, MPPIConfig
from robot_rl.agents.ppo import PPOConfig
from robot_rl.compose import compose
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.world_model import WorldModelCriticConfig
from robot_rl.errors import InputError
from robot_rl.math.two_hot import two_hot

GAMMA, T = 0.9, 3


pytestmark = pytest.mark.usefixtures("one_thread")


def _step(s, a):
    """Deterministic toy: ``s' = clip(s + 0.25 a)``, ``r = -|s'|^2`` (2-D state, 2-D action)."""
    s = (s + 0.25 * a).clamp(-1, 1)
    return s, -s.pow(2).sum(-1, keepdim=True)


def _pi(s):
    return -(4 * s).clamp(-1, 1)


def _cfg(**kw):
    return WorldModelCriticConfig(latent_dim=32, simnorm_dim=8, hidden_dims=[64, 64], **kw)


def _batch(n=128):
    s = torch.rand(n, 2) * 2 - 1
    obs, actions, rewards = [s], [], []
    for _ in range(T):
        a = torch.rand(n, 2) * 2 - 1
        s, r = _step(s, a)
        obs.append(s)
        actions.append(a)
        rewards.append(r)
    return torch.stack(obs), torch.stack(actions), torch.stack(rewards)


def _train(critic, steps):
    critic.target_critic()
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    history = []
    for _ in range(steps):
        obs, actions, rewards = _batch()
        targets = critic.td_targets(obs[1:], _pi(obs[1:]), rewards, torch.full(rewards.shape[:2], GAMMA))
        loss, metrics = critic.rollout_loss(obs, actions, rewards, targets)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.parameters(), 20.0)
        opt.step()
        critic.update_target(0.01)
        history.append(metrics)
    return history


@pytest.fixture(scope="module", params=["scalar", "two_hot"])
def trained(request):
    """A Q world model trained 2000 updates on the toy, with each reward/Q head type."""
    torch.manual_seed(0)
    critic = make_critic(_cfg(value_head=request.param), CriticSpec(obs_dim=2, action_dim=2))
    with torch.enable_grad():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        history = _train(critic, 2000)
        torch.set_num_threads(threads)
    return critic, history


def _mean(history, key, part):
    values = [h[key] for h in history]
    k = len(values) // 10
    return sum(values[:k]) / k if part == "first" else sum(values[-k:]) / k


@pytest.mark.parametrize("key", ["consistency_loss", "reward_loss"])
@pytest.mark.slow
def test_model_losses_decrease_on_a_deterministic_toy_system(trained, key):
    critic, history = trained
    first, last = _mean(history, key, "first"), _mean(history, key, "last")
    floor = 0.0
    if key == "reward_loss" and critic.two_hot:
        # Cross-entropy against two-hot targets cannot fall below their entropy: compare what is above it.
        torch.manual_seed(5)
        target = two_hot(_batch(4096)[2], critic.cfg.num_bins, critic.cfg.vmin, critic.cfg.vmax)
        floor = float(-(target * target.clamp(min=1e-12).log()).sum(-1).mean())
    print(f"{key}: first 10% mean {first:.5f} -> last 10% mean {last:.5f} (floor {floor:.5f})")
    assert last - floor < 0.2 * (first - floor)


def _true_value(s, a, steps=60):
    s, r = _step(s, a)
    total = r.squeeze(-1)
    for k in range(1, steps):
        s, r = _step(s, _pi(s))
        total += GAMMA**k * r.squeeze(-1)
    return total


@pytest.mark.slow
def test_q_heads_learn_the_policy_value_through_the_latent_model(trained):
    critic, history = trained
    torch.manual_seed(3)
    s, a = torch.rand(512, 2) * 2 - 1, torch.rand(512, 2) * 2 - 1
    truth = _true_value(s, a)
    pred = critic(critic.encode(s), a).squeeze(-1).detach()
    err, bias = (pred - truth).abs().mean().item(), (pred - truth).mean().item()
    corr = torch.corrcoef(torch.stack([pred, truth]))[0, 1].item()
    td = _mean(history, "critic_loss", "last")
    print(f"{critic.cfg.value_head} heads: Q error {err:.3f} (bias {bias:+.3f}, correlation {corr:.3f}) vs mean |Q| "
          f"{truth.abs().mean():.3f}; TD loss {td:.4f}")
    assert corr > 0.9
    # Two-hot heads settle more slowly on this toy: at 2000 updates their values are pessimistic
    # (mean error 0.69, bias -0.69; 0.36 after 5000 updates), scalar heads are at 0.12.
    assert err < (0.75 if critic.two_hot else 0.25) * truth.abs().mean().item()


@pytest.mark.slow
def test_latent_rollout_predicts_rewards_of_unseen_sequences(trained):
    critic, _ = trained
    torch.manual_seed(4)
    obs, actions, rewards = _batch(256)
    z = critic.encode(obs[0])
    errs = []
    for t in range(T):
        errs.append((critic.predict_reward(z, actions[t]) - rewards[t]).abs().mean().item())
        z = critic.next(z, actions[t])
    print(f"reward error along the latent rollout {errs} (mean |r| {rewards.abs().mean():.3f})")
    assert max(errs) < 0.1 * rewards.abs().mean().item()


@pytest.mark.slow
def test_mppi_plans_towards_the_origin_better_than_random(trained):
    critic, _ = trained
    s = torch.tensor([[0.6, -0.4], [-0.3, 0.5]])
    planner = MPPI(MPPIConfig(samples=128, elites=16, horizon=2, gamma=GAMMA), critic)
    action = planner.plan(s, generator=torch.Generator().manual_seed(0))
    print(f"MPPI actions {action.tolist()} for states {s.tolist()}")
    assert action.shape == (2, 2) and bool((action.abs() <= 1).all())
    assert bool((action * s < 0).all()), "planned actions must push every coordinate towards 0"
    random = torch.rand(1000, 2) * 2 - 1
    planned_value = _true_value(s, action)
    random_value = _true_value(s[:1].expand(1000, -1), random).mean()
    assert planned_value[0] > random_value


def test_v_world_model_critic_runs_in_ppo_and_its_latent_loss_decreases():
    torch.manual_seed(0)
    env = ToyReach(num_envs=16, seed=0)
    cfg = PPOConfig(actor_hidden_dims=[32], num_steps_per_env=8, num_mini_batches=2)
    agent = make_agent(cfg, _cfg(), EnvSpec.from_env(env))
    obs = env.reset(seed=0)
    assert agent.critic.encode(obs["critic"]) is obs["critic"]  # V kind: PPO's critic(obs) works unchanged
    for _ in range(8):
        action = agent.act(obs)
        step = env.step(action.clamp(-1, 1))
        agent.observe(obs, action, step)
        obs = step.obs
    metrics = agent.update()
    assert torch.isfinite(torch.tensor(metrics["loss/value"]))
    exported = agent.policy().state_dict()  # the deployable policy carries no world model
    assert not any(k.startswith(("encoder", "dynamics", "v_head")) for k in exported)
    assert sum(t.numel() for t in exported.values()) < sum(p.numel() for p in agent.critic.parameters())
    # The auxiliary latent loss on a deterministic toy system: o' = o + 0.1, r = sum(o).
    critic = make_critic(_cfg(), CriticSpec(obs_dim=3))
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    losses = []
    for _ in range(600):
        o = torch.rand(128, 3)
        loss, m = critic.latent_loss(o, o + 0.1, o.sum(-1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(20 * m["consistency_loss"] + 0.1 * m["reward_loss"])
    print(f"V latent loss: first 60 mean {sum(losses[:60]) / 60:.4f} -> last 60 {sum(losses[-60:]) / 60:.4f}")
    assert sum(losses[-60:]) < 0.2 * sum(losses[:60])


@pytest.mark.parametrize("value_head", ["scalar", "two_hot"])
def test_world_model_round_trip_and_errors(tmp_path, value_head):
    spec = CriticSpec(obs_dim=2, action_dim=2)
    a, b = make_critic(_cfg(value_head=value_head), spec), make_critic(_cfg(value_head=value_head), spec)
    for p in a.parameters():  # move off the initialisation (two-hot heads start at zero)
        p.data.add_(0.1 * torch.randn_like(p))
    a.update_target(1.0)
    save_file(a.state_dict(), tmp_path / "wm.safetensors")
    save_file(a.target_state_dict(), tmp_path / "wm_target.safetensors")
    b.load_state_dict(load_file(tmp_path / "wm.safetensors"))
    b.load_target_state_dict(load_file(tmp_path / "wm_target.safetensors"))
    s, act = torch.randn(5, 2), torch.rand(5, 2)
    assert torch.equal(a(a.encode(s), act, reduce="none"), b(b.encode(s), act, reduce="none"))
    assert torch.equal(a.next(a.encode(s), act), b.next(b.encode(s), act))
    assert torch.equal(a(a.encode(s), act, target=True), b(b.encode(s), act, target=True))
    assert torch.equal(a.predict_reward(a.encode(s), act), b.predict_reward(b.encode(s), act))
    assert a.predict_reward(a.encode(s), act).shape == (5, 1)
    v = make_critic(_cfg(value_head=value_head), CriticSpec(obs_dim=3, num_values=2))  # V kind: reward head only
    o = torch.rand(4, 3)
    loss, _ = v.latent_loss(o, o + 0.1, torch.rand(4, 2))
    assert torch.isfinite(loss) and v(o).shape == (4, 2) and v.predict_reward(v.encoder(o)).shape == (4, 2)
    with pytest.raises(ValueError, match="multiple of simnorm_dim"):
        WorldModelCriticConfig(latent_dim=30, simnorm_dim=8)
    with pytest.raises(ValueError, match="value_head must be one of"):
        WorldModelCriticConfig(value_head="categorical")
    with pytest.raises(ValueError, match=r"critic\.num_bins must be >= 2"):
        WorldModelCriticConfig(value_head="two_hot", num_bins=1)
    with pytest.raises(ValueError, match=r"critic\.vmin must be < critic\.vmax"):
        WorldModelCriticConfig(value_head="two_hot", vmin=5.0, vmax=-5.0)
    with pytest.raises(InputError, match=r"agent\.plan\.min_std = 3\.0: must be <= max_std=2\.0"):
        MPPIConfig(min_std=3.0, max_std=2.0)
    with pytest.raises(InputError, match=r"agent\.plan\.elites = 9: must be <= samples=8"):
        MPPIConfig(samples=8, elites=9)
    with pytest.raises(InputError, match=r"agent\.plan\.temperature = nan: must be a finite number"):
        MPPIConfig(temperature=float("nan"))
    with pytest.raises(ValueError, match=r"obs \[T\+1, B, D\]"):
        a.rollout_loss(torch.zeros(2, 4, 2), torch.zeros(2, 4, 2), torch.zeros(2, 4, 1), torch.zeros(2, 4, 1))


def test_config_file_composes_to_the_typed_schema():
    cfg = compose(['critic=world_model'])
    assert isinstance(cfg.critic, WorldModelCriticConfig) and cfg.critic.num_q == 5


@pytest.mark.parametrize("td_encoder", ["target", "online"])
def test_td_target_embeds_next_obs_with_the_chosen_encoder(td_encoder):
    """``td_encoder=online`` (TD-MPC2) reads o' through the online encoder and the target Q heads; ``target``
    through the target copy of both. Moving only the target encoder must change the second alone."""
    torch.manual_seed(0)
    critic = make_critic(_cfg(td_encoder=td_encoder), CriticSpec(obs_dim=2, action_dim=2))
    critic.update_target(1.0)
    obs, act, rew, disc = torch.rand(3, 4, 2), torch.rand(3, 4, 2), torch.rand(3, 4, 1), torch.full((3, 4), GAMMA)
    torch.manual_seed(1)  # the same random target heads in every call
    before = critic.td_targets(obs, act, rew, disc)
    with torch.no_grad():
        for p in critic.target_critic().encoder.parameters():
            p.add_(0.5 * torch.randn_like(p))
    torch.manual_seed(1)
    after = critic.td_targets(obs, act, rew, disc)
    torch.manual_seed(1)
    again = critic.td_targets(obs, act, rew, disc)
    assert torch.equal(after, again)
    assert torch.equal(before, after) == (td_encoder == "online")
    with pytest.raises(ValueError, match="td_encoder must be one of"):
        WorldModelCriticConfig(td_encoder="ema")
