"""Multi-critic: per-group normalisation math, independent group networks, PPO learning, save/load, export."""

import onnx
import pytest
import torch
from safetensors.torch import load_file, save_file
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.ppo import PPOConfig
from robot_rl.compose import compose
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.multi import MultiCriticConfig
from robot_rl.export import PolicyHead, export_policy, make_meta
from robot_rl.math.advantages import gae, normalize_per_group

pytestmark = pytest.mark.usefixtures("one_thread")


def test_per_group_normalisation_by_hand():
    # group 0: [1, 3] -> mean 2, std 1 -> [-1, 1]; group 1: [10, 30] -> mean 20, std 10 -> [-1, 1]
    adv = torch.tensor([[1.0, 10.0], [3.0, 30.0]])
    out = normalize_per_group(adv, torch.tensor([1.0, 0.5]), eps=0.0)
    torch.testing.assert_close(out, torch.tensor([-1.5, 1.5]))
    # A group's reward scale does not change its say: scaling group 1 by 1000 gives the same result.
    torch.testing.assert_close(normalize_per_group(adv * torch.tensor([1.0, 1000.0]), torch.tensor([1.0, 0.5]),
                                                   eps=0.0), out)
    # Unified normalisation of the summed advantage lets the large group dominate instead:
    total = adv.sum(-1)
    torch.testing.assert_close((total - total.mean()) / total.std(unbiased=False), torch.tensor([-1.0, 1.0]))
    mixed = torch.tensor([[1.0, 30.0], [3.0, 10.0]])  # the groups disagree
    per_group = normalize_per_group(mixed, eps=0.0)
    torch.testing.assert_close(per_group, torch.tensor([0.0, 0.0]))  # equal weights cancel
    unified = mixed.sum(-1)
    assert (unified[0] - unified[1]).item() == pytest.approx(18.0)  # the 10x group decides


def test_per_group_gae_then_normalisation_matches_hand_values():
    # One env, two steps, two groups, gamma = 0.5, lambda = 1, episode continues, bootstrap 0.
    rewards = torch.tensor([[[1.0, 0.0]], [[1.0, 4.0]]])  # [T=2, N=1, G=2]
    values = torch.zeros_like(rewards)
    no = torch.zeros(2, 1, dtype=torch.bool)
    adv, _ = gae(rewards, values, torch.zeros_like(rewards), no, no, 0.5, 1.0)
    # group 0: A_1 = 1, A_0 = 1 + 0.5 = 1.5; group 1: A_1 = 4, A_0 = 0 + 0.5 * 4 = 2
    torch.testing.assert_close(adv[:, 0], torch.tensor([[1.5, 2.0], [1.0, 4.0]]))
    # normalised: group 0 [1.5, 1] -> [1, -1]; group 1 [2, 4] -> [-1, 1]; weights [2, 1] -> [1, -1]
    out = normalize_per_group(adv.flatten(0, 1), torch.tensor([2.0, 1.0]), eps=0.0)
    torch.testing.assert_close(out, torch.tensor([1.0, -1.0]))


@pytest.mark.parametrize("shared_trunk", [False, True])
def test_group_networks_are_independent_unless_shared(shared_trunk):
    torch.manual_seed(0)
    critic = make_critic(MultiCriticConfig(hidden_dims=[16], shared_trunk=shared_trunk), CriticSpec(3, num_values=2))
    obs = torch.randn(32, 3)
    before = critic(obs).detach()
    opt = torch.optim.SGD(critic.parameters(), lr=0.5)
    loss = (critic(obs)[:, 0] - 5.0).pow(2).mean()  # train group 0 only
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = critic(obs).detach()
    assert not torch.allclose(after[:, 0], before[:, 0])
    assert torch.equal(after[:, 1], before[:, 1]) != shared_trunk


def _ppo(env, per_group: bool):
    torch.manual_seed(0)
    cfg = PPOConfig(actor_hidden_dims=[64, 64], num_steps_per_env=16, per_group_values=per_group,
                    group_weights=[1.0, 0.5] if per_group else [])
    return make_agent(cfg, MultiCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))


def _success(agent, env) -> float:
    obs = env.reset(seed=123)
    for _ in range(env.max_episode_steps):
        step = env.step(agent.act(obs, deterministic=True).clamp(-1, 1))
        obs = step.obs
    return float(step.info["success"].float().mean())


@pytest.mark.slow
def test_ppo_with_per_group_critics_learns_toy_reach():
    env = ToyReach(num_envs=64, seed=0)
    agent = _ppo(env, per_group=True)
    assert agent.critic.estimates(torch.zeros(1, 5)).shape == (1, 1, 2)
    before = _success(agent, ToyReach(num_envs=256, seed=5))
    obs = env.reset(seed=0)
    for _ in range(60 * 16):  # 60 updates: success passes through a dip near 20-40 updates (1.0 from 50 to 80)
        action = agent.act(obs)
        step = env.step(action.clamp(-1, 1))
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()
    after = _success(agent, ToyReach(num_envs=256, seed=5))
    print(f"PPO + critic=multi on ToyReach: success {before:.2f} -> {after:.2f}")
    assert before < 0.2 and after >= 0.9, (before, after)


def test_multi_critic_round_trip_and_policy_artifact_holds_no_critic(tmp_path):
    env = ToyReach(num_envs=4)
    agent = _ppo(env, per_group=True)
    agent.critic.update_normalizer(torch.randn(64, 5) * 3)
    save_file(agent.critic.state_dict(), tmp_path / "critic.safetensors")
    clone = _ppo(env, per_group=True)
    clone.critic.load_state_dict(load_file(tmp_path / "critic.safetensors"))
    obs = torch.randn(9, 5)
    assert torch.equal(clone.critic(obs), agent.critic(obs))

    policy = agent.policy()
    critic_numel = sum(p.numel() for p in agent.critic.parameters())
    policy_numel = sum(t.numel() for t in policy.state_dict().values())
    actor_numel = sum(t.numel() for t in agent.actor.state_dict().values())
    assert policy_numel == actor_numel
    meta = make_meta("toy", ["x", "y"], [0.0, 0.0], [("joint_pos", 2, 1.0)], 1.0, 20, task="toy_reach")
    out = export_policy(PolicyHead(policy, meta), meta, tmp_path / "policy", formats=["onnx"])
    model = onnx.load(str(out / "policy.onnx"))
    exported = sum(int(torch.tensor(list(t.dims)).prod()) for t in model.graph.initializer)
    print(f"artifact weights {exported}, actor {actor_numel}, critic {critic_numel}")
    assert exported < actor_numel + 64 < critic_numel


def test_config_file_composes_to_the_typed_schema():
    cfg = compose(['critic=multi', 'agent.per_group_values=true'])
    assert isinstance(cfg.critic, MultiCriticConfig) and cfg.agent.per_group_values
