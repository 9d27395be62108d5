"""agent=tdmpc (TD-MPC2-style world-model agent): replay windows, learning, planning, persistence, export."""

import onnx
import onnxruntime as ort
import pytest
import torch
from agent_loop import drive
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.mppi import MPPIConfig
from robot_rl.agents.tdmpc import TDMPCConfig
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.compose import compose
from robot_rl.critics.ensemble import EnsembleCriticConfig
from robot_rl.critics.world_model import WorldModelCriticConfig
from robot_rl.data.replay_buffer import ReplayBuffer
from robot_rl.errors import InputError
from robot_rl.export import PolicyHead, export_policy, make_meta

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sample_windows_follow_episode_ends_and_the_ring_by_hand():
    # 2 envs, 6 steps into a 5-row ring (step 0 overwritten). obs = 10 env + t, true next obs = obs + 0.5;
    # env 0 terminates at t = 2, env 1 is truncated at t = 3.
    buf = ReplayBuffer(5, 2, {"policy": 1}, 1)
    for t in range(6):
        obs = torch.tensor([[float(t)], [10.0 + t]])
        buf.add({"policy": obs}, torch.full((2, 1), float(t)), torch.tensor([t, 10.0 + t]),
                {"policy": obs + 0.5}, torch.tensor([t == 2, False]), torch.tensor([False, t == 3]))
    w = buf.sample_windows(400, 3, generator=torch.Generator().manual_seed(0))
    assert w.obs["policy"].shape == (4, 400, 1) and w.actions.shape == (3, 400, 1) and w.alive.shape == (3, 400)
    starts = set()
    for b in range(400):
        first = float(w.obs["policy"][0, b, 0])
        env, t0 = (1, int(first) - 10) if first >= 10 else (0, int(first))
        starts.add((env, t0))
        end = 2 if env == 0 else 3
        for k in range(3):
            t = t0 + k
            alive = t <= 5 and not any(s == end for s in range(t0, t))
            assert bool(w.alive[k, b]) == alive, (env, t0, k)
            if alive:
                assert float(w.actions[k, b, 0]) == t and float(w.rewards[k, b]) == 10 * env + t
                assert float(w.obs["policy"][k + 1, b, 0]) == 10 * env + t + 0.5
                assert bool(w.terminated[k, b]) == (env == 0 and t == 2)
    assert starts == {(e, t) for e in (0, 1) for t in range(1, 6)}  # step 0 left the ring, every row drawn


def _agent(env, act_with="policy", value_head="scalar", **kw):
    torch.manual_seed(0)
    cfg = TDMPCConfig(learning_starts=800, batch_size=128, actor_hidden_dims=[64, 64], gamma=0.9, utd_ratio=0.25,
                      buffer_size=20000, act_with=act_with,
                      plan=MPPIConfig(samples=64, elites=8, iterations=2, policy_samples=8), **kw)
    critic = WorldModelCriticConfig(latent_dim=32, hidden_dims=[64, 64], num_q=2, value_head=value_head)
    return make_agent(cfg, critic, EnvSpec.from_env(env))


def _success(policy, num_envs: int = 256) -> float:
    env = ToyReach(num_envs=num_envs, seed=5)
    obs = env.reset(seed=123)
    with torch.no_grad():
        for _ in range(env.max_episode_steps):
            step = env.step(policy(obs["policy"]))
            obs = step.obs
    return float(step.info["success"].float().mean())


def _collect(agent, env, steps) -> list[dict[str, float]]:
    history: list[dict[str, float]] = []
    drive(agent, env, steps, on_update=history.append)
    return history


@pytest.mark.parametrize("value_head", ["scalar", "two_hot"])
@pytest.mark.slow
def test_tdmpc_learns_toy_reach_its_world_model_losses_fall_and_planning_reaches_too(value_head):
    env = ToyReach(num_envs=16, seed=0)
    agent = _agent(env, value_head=value_head)
    before = _success(agent.policy())
    history = _collect(agent, env, 350 if value_head == "scalar" else 450)
    after, planned = _success(agent.policy()), _success(agent.planning_policy(), num_envs=64)
    tenth = len(history) // 10
    early = {k: sum(h[k] for h in history[:tenth]) / tenth for k in history[0]}
    late = {k: sum(h[k] for h in history[-tenth:]) / tenth for k in history[0]}
    print(f"tdmpc ({value_head} heads) on ToyReach: prior success {before:.2f} -> {after:.2f}, MPPI {planned:.2f}; "
          f"{len(history)} updates; consistency {early['loss/consistency_loss']:.5f} -> "
          f"{late['loss/consistency_loss']:.5f}, reward {early['loss/reward_loss']:.4f} -> "
          f"{late['loss/reward_loss']:.4f}")
    # Two-hot heads are slower on this toy: at 350 steps torch seeds 0 / 1 / 2 gave prior success 1.00 / 0.00 / 1.00
    # and MPPI 0.80 / 1.00 / 1.00 on one machine, and MPPI 0.67 (one torch thread, as the suite runs) on another
    # (2026-12-03), where 450 steps give 1.00 / 1.00; scalar heads: 1.00 everywhere at 350.
    assert before < 0.2 and after >= 0.9 and planned >= (0.75 if value_head == "two_hot" else 0.9)
    assert late["loss/consistency_loss"] < 0.5 * early["loss/consistency_loss"]
    assert late["loss/reward_loss"] < 0.7 * early["loss/reward_loss"]


@pytest.mark.parametrize("value_head", ["scalar", "two_hot"])
def test_tdmpc_plans_while_collecting_resumes_from_a_checkpoint_and_exports_the_prior_only(tmp_path, value_head):
    env = ToyReach(num_envs=4, seed=0)
    agent = _agent(env, act_with="plan", value_head=value_head)
    _collect(agent, env, 230)  # past warm-up (800 transitions): planned exploration and a few updates
    assert agent.updates > 0 and bool(agent.plan_mean.abs().sum() > 0)
    path = save_checkpoint(tmp_path, agent.env_steps, agent.state_dict())
    clone = _agent(env, act_with="plan", value_head=value_head)
    _, state = load_checkpoint(path)
    clone.load_state_dict(state)
    obs = {"policy": torch.randn(5, 2), "critic": torch.randn(5, 5)}
    torch.manual_seed(3)
    planned = agent.act(obs, deterministic=True)
    torch.manual_seed(3)
    assert torch.equal(clone.act(obs, deterministic=True), planned)
    assert clone.buffer.size == agent.buffer.size and clone.updates == agent.updates
    assert torch.equal(clone.q_scale, agent.q_scale) and torch.equal(clone.plan_mean, agent.plan_mean)
    z, a = agent.critic.encode(obs["policy"]), torch.rand(5, 2) * 2 - 1
    assert torch.equal(clone.critic(z, a, reduce="none"), agent.critic(z, a, reduce="none"))
    assert torch.equal(clone.critic.predict_reward(z, a), agent.critic.predict_reward(z, a))

    policy = agent.policy()
    assert torch.equal(policy(obs["policy"]), agent.to_env_action(agent.actor(agent.critic.encode(obs["policy"]))))
    prior = sum(t.numel() for t in agent.actor.state_dict().values())
    encoder = sum(t.numel() for t in agent.critic.encoder.state_dict().values())
    model = sum(p.numel() for m in (agent.critic.dynamics, agent.critic.reward, agent.critic.q_heads)
                for p in m.parameters())
    meta = make_meta("toy", ["x", "y"], [0.0, 0.0], [("joint_pos", 2, 1.0)], 1.0, 20, task="toy_reach")
    out = export_policy(PolicyHead(policy, meta), meta, tmp_path / "policy", formats=["onnx"])
    graph = onnx.load(str(out / "policy.onnx")).graph
    exported = sum(int(torch.tensor(list(t.dims)).prod()) for t in graph.initializer)
    print(f"artifact weights {exported}: prior {prior} + encoder {encoder}; dynamics/reward/Q not exported ({model})")
    assert prior + encoder <= exported < prior + encoder + 64
    session = ort.InferenceSession(str(out / "policy.onnx"))
    x = torch.randn(7, 2)
    got = session.run(None, {"obs": x.numpy()})[0]
    assert torch.allclose(torch.from_numpy(got), policy(x).detach(), atol=1e-5)


def test_tdmpc_refuses_other_critics_and_bad_settings():
    env = ToyReach(num_envs=2)
    with pytest.raises(ValueError, match="critic=world_model"):
        make_agent(TDMPCConfig(), EnsembleCriticConfig(), EnvSpec.from_env(env))
    with pytest.raises(ValueError, match="act_with"):
        TDMPCConfig(act_with="mpc")
    with pytest.raises(ValueError, match="horizon"):
        TDMPCConfig(horizon=0)
    with pytest.raises(ValueError, match=r"set critic\.normalize_obs=true instead"):
        TDMPCConfig(normalize_obs=True)  # the encoder normalises; an agent normaliser would do it twice


def test_tdmpc_config_file_composes_to_the_typed_schema():
    cfg = compose(["agent=tdmpc", "critic=world_model", "agent.act_with=policy"])
    assert isinstance(cfg.agent, TDMPCConfig) and cfg.agent.act_with == "policy" and cfg.agent.horizon == 3
    assert isinstance(cfg.critic, WorldModelCriticConfig) and cfg.agent.plan.policy_samples == 24
    assert compose(["agent=tdmpc", "agent.plan.samples=16", "agent.plan.elites=4"]).agent.plan.elites == 4
    with pytest.raises(InputError, match=r"agent\.plan\.elites = 300: must be <= samples=256"):
        compose(["agent=tdmpc", "agent.plan.elites=300"])
    assert isinstance(compose(["agent=tdmpc"]).critic, WorldModelCriticConfig)  # the agent's default critic
