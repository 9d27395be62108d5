"""Our PPO against rsl_rl's (the installed ``rsl-rl-lib``, a dev dependency) on the same data.

Both start from the same weights, act on the same rollout (our sampled actions are fed to rsl_rl's
storage, its critic and actor recompute values and log-probabilities), and draw the same mini-batch
permutation. After two full updates (GAE, advantage normalisation, clipped surrogate, clipped value
loss, entropy bonus, adaptive-KL learning rate, per-network gradient clipping, Adam, observation
normalisers updated after the update) every parameter, normaliser statistic and the learning rate
must agree. ToyReach episodes never truncate here (10,000-step limit), so the one deliberate
difference, our exact time-out bootstrap, does not enter; terminations do (leaving the box).
The permutation matches when there is one epoch or one mini-batch: ours reshuffles every epoch,
rsl_rl draws one permutation per update, the other deliberate difference.
"""

import pytest
import torch
from rsl_rl import algorithms as rsl_algorithms
from tensordict import TensorDict
from toy_vecenv import ToyReach

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.ppo import PPOConfig
from robot_rl.critics.mlp import MLPCriticConfig

HIDDEN = [32, 32]


def _pair(env: ToyReach, cfg: PPOConfig) -> tuple[object, rsl_algorithms.PPO]:
    """Our agent and rsl_rl's PPO with identical weights (``[Linear, ELU] * 2 + Linear`` both sides)."""
    torch.manual_seed(0)
    ours = make_agent(cfg, MLPCriticConfig(hidden_dims=HIDDEN), EnvSpec.from_env(env))
    alg_keys = ("num_learning_epochs", "num_mini_batches", "clip_param", "gamma", "lam", "value_loss_coef",
                "entropy_coef", "learning_rate", "max_grad_norm", "use_clipped_value_loss", "schedule", "desired_kl")
    train_cfg = {
        "num_steps_per_env": cfg.num_steps_per_env,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "multi_gpu": None,
        "algorithm": {"class_name": "PPO", **{k: getattr(cfg, k) for k in alg_keys}},
        "actor": {"class_name": "MLPModel", "hidden_dims": HIDDEN, "activation": "elu", "obs_normalization": True,
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": cfg.init_noise_std,
                                       "std_type": cfg.noise_std_type}},
        "critic": {"class_name": "MLPModel", "hidden_dims": HIDDEN, "activation": "elu", "obs_normalization": True},
    }
    obs = TensorDict(env.reset(seed=0), batch_size=[env.num_envs])
    env_info = type("EnvInfo", (), {"num_envs": env.num_envs, "num_actions": env.action_dim})()
    rsl = rsl_algorithms.PPO.construct_algorithm(obs, env_info, train_cfg, "cpu")
    with torch.no_grad():
        rsl.actor.mlp.load_state_dict(ours.actor.net.state_dict())
        rsl.critic.mlp.load_state_dict(ours.critic.net.state_dict())
        rsl.actor.distribution.std_param.copy_(ours.actor.std_param)
    rsl.train_mode()
    return ours, rsl


def _rollout(ours, rsl: rsl_algorithms.PPO, env: ToyReach, obs: dict, steps: int) -> dict:
    """``steps`` env steps acted by ours; rsl_rl records the same transitions with its own values,
    log-probabilities and distribution parameters. Returns the next observation."""
    for _ in range(steps):
        action = ours.act(obs)
        td = TensorDict(obs, batch_size=[env.num_envs])
        with torch.inference_mode():
            rsl.act(td)  # sets rsl_rl's values and distribution for this obs; its own sample is replaced
            rsl.transition.actions = action.clone()
            rsl.transition.actions_log_prob = rsl.actor.get_output_log_prob(action)
        step = env.step(action.clamp(env.action_low, env.action_high))
        ours.observe(obs, action, step)
        done = step.terminated | step.truncated
        with torch.inference_mode():
            rsl.process_env_step(TensorDict(step.obs, batch_size=[env.num_envs]), step.reward, done.long(),
                                 {"time_outs": step.truncated})
        obs = step.obs
    return obs


@pytest.mark.parametrize(("epochs", "mini_batches"), [(1, 4), (3, 1)])
def test_two_updates_match_rsl_rl(epochs, mini_batches):
    env = ToyReach(num_envs=64, max_episode_steps=10_000)
    cfg = PPOConfig(num_steps_per_env=16, num_learning_epochs=epochs, num_mini_batches=mini_batches,
                    actor_hidden_dims=HIDDEN, init_noise_std=0.5, entropy_coef=0.01, desired_kl=0.01,
                    learning_rate=3e-3)
    ours, rsl = _pair(env, cfg)
    obs = env.reset(seed=1)
    terminated, lrs = 0, [cfg.learning_rate]
    for update in range(2):
        obs = _rollout(ours, rsl, env, obs, cfg.num_steps_per_env)
        s = ours.storage
        terminated += int(s.terminated.sum())
        close = {"atol": 1e-4, "rtol": 1e-4}  # float32 rounding; see the normaliser note below
        torch.testing.assert_close(rsl.storage.actions_log_prob.squeeze(-1), s.log_prob, **close)
        torch.testing.assert_close(rsl.storage.distribution_params[0], s.mean, **close)
        with torch.inference_mode():
            rsl.compute_returns(TensorDict(obs, batch_size=[env.num_envs]))
        rsl_values = rsl.storage.values.squeeze(-1).clone()  # rsl_rl's, one step at a time while acting
        torch.manual_seed(100 + update)
        ours.update()
        torch.testing.assert_close(rsl_values, s.values.squeeze(-1), **close)  # ours, in one batch at the update
        torch.manual_seed(100 + update)
        rsl.update()
        assert ours.learning_rate == pytest.approx(rsl.learning_rate, rel=1e-9), f"update {update}"
        lrs.append(ours.learning_rate)
    assert terminated > 0, "no episode terminated: the done mask was not exercised"
    assert len(set(lrs)) > 1, f"the adaptive schedule never moved the learning rate: {lrs}"
    pairs = [(ours.actor.net, rsl.actor.mlp), (ours.critic.net, rsl.critic.mlp)]
    for a, b in pairs:
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(p, q, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(ours.actor.std_param, rsl.actor.distribution.std_param, atol=2e-5, rtol=1e-4)
    for norm, ref in ((ours.actor.normalizer, rsl.actor.obs_normalizer), (ours.critic.normalizer,
                                                                          rsl.critic.obs_normalizer)):
        assert int(norm.count) == int(ref.count) == 2 * 16 * 64
        torch.testing.assert_close(norm.mean, ref.mean)
        # rsl_rl's first merge computes 1 + (var - 1): ~1e-7 absolute error, relative for tiny variances
        torch.testing.assert_close(norm.var.sqrt(), ref.std, atol=1e-5, rtol=1e-4)
