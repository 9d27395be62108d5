"""PPO with a World-Critic-Model value (critic=world_model as V): the auxiliary-loss hook trains the
value's encoder to predict the next latent and the reward."""

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.ppo import PPOConfig
from robot_rl.critics.mlp import MLPCriticConfig
from robot_rl.critics.world_model import WorldModelCriticConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def _ppo(critic_cfg, env):
    torch.manual_seed(0)
    cfg = PPOConfig(actor_hidden_dims=[32], num_steps_per_env=8, num_mini_batches=2, num_learning_epochs=2)
    return make_agent(cfg, critic_cfg, EnvSpec.from_env(env))


def _rollout(agent, env, obs):
    for _ in range(agent.cfg.num_steps_per_env):
        action = agent.act(obs)
        step = env.step(action.clamp(-1, 1))
        agent.observe(obs, action, step)
        obs = step.obs
    return obs


def _wm(aux_coef=1.0):
    return WorldModelCriticConfig(latent_dim=16, hidden_dims=[32], num_q=2, aux_coef=aux_coef)


def test_rollout_successors_are_the_next_critic_obs_and_episode_ends_are_masked():
    env = ToyReach(num_envs=4, seed=0, max_episode_steps=3)  # every env ends at steps 3 and 6 of 8
    agent = _ppo(_wm(), env)
    _rollout(agent, env, env.reset(seed=0))
    s = agent.storage
    succ = s.successors()
    nxt, valid = succ["next_critic_obs"].reshape(8, 4, -1), succ["next_valid"].reshape(8, 4)
    assert torch.equal(valid, ~s.done)
    assert not valid[2].any() and not valid[5].any() and valid[0].all()
    for t in range(7):
        assert torch.equal(nxt[t][valid[t]], s.critic_obs[t + 1][valid[t]])
    assert torch.equal(nxt[7], s.last_critic_obs)
    assert torch.equal(succ["rewards"].reshape(8, 4, -1), s.rewards)


def test_ppo_adds_the_world_critic_latent_loss_and_it_trains_the_value_encoder():
    env = ToyReach(num_envs=16, seed=0)
    agents = {c: _ppo(_wm(c), env) for c in (1.0, 0.0)}
    held_out = {c: [] for c in agents}
    for coef, agent in agents.items():
        env = ToyReach(num_envs=16, seed=0)
        obs = env.reset(seed=0)
        for _ in range(25):
            obs = _rollout(agent, env, obs)
            batch = agent.storage.flat(torch.zeros(8, 16, 1), torch.zeros(8 * 16))
            batch.update(agent.storage.successors())
            with torch.no_grad():  # the latent loss on this fresh rollout, before learning from it
                held_out[coef].append(agent.critic.latent_loss(
                    batch["critic_obs"], batch["next_critic_obs"], batch["rewards"], batch["next_valid"])[0].item())
            metrics = agent.update()
        assert metrics["loss/consistency_loss"] >= 0 and "loss/reward_loss" in metrics
    first, last = held_out[1.0][0], sum(held_out[1.0][-5:]) / 5
    untrained = sum(held_out[0.0][-5:]) / 5
    print(f"held-out latent loss with the hook: {first:.4f} -> {last:.4f}; aux_coef=0: {untrained:.4f}")
    assert last < 0.6 * first and last < 0.2 * untrained
    # A critic without aux_loss leaves PPO's loss as it was (no successor tensors, no extra metrics).
    plain = _ppo(MLPCriticConfig(hidden_dims=[32]), env)
    _rollout(plain, env, env.reset(seed=0))
    assert "loss/consistency_loss" not in plain.update()
