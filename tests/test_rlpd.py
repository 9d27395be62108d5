"""RLPD: the demo partition, symmetric sampling, the LayerNorm critic, BC initialisation, checkpoints, a tiny run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from agent_loop import drive
from expert_demos import clone_demos, record_expert_demos

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.bc import load_clone
from robot_rl.agents.rlpd import RLPD, RLPDConfig
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.layer_norm import LayerNormEnsembleCritic, LayerNormEnsembleCriticConfig
from robot_rl.data.demo_buffer import demo_replay
from robot_rl.data.transitions import demo_transitions

SHORT = {"episode_s": 1.0}  # 25 control steps at 25 Hz


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 scripted-expert so101_reach episodes of 25 frames."""
    return record_expert_demos(tmp_path_factory.mktemp("rlpd") / "reach", "so101_reach", 4, 2, 4, SHORT)


def test_demo_partition_holds_the_dataset(reach_demos: Path) -> None:
    t = demo_transitions(reach_demos)
    buffer = demo_replay(reach_demos, {"policy": 21}, 6)
    assert len(buffer) == 100
    np.testing.assert_array_equal(buffer.obs["policy"][:, 0].numpy(), t["obs"])
    np.testing.assert_array_equal(buffer.next_obs["policy"][:, 0].numpy(), t["next_obs"])
    np.testing.assert_array_equal(buffer.action[:, 0].numpy(), t["action"])
    # every episode ends in a done, so n-step windows stop there: no 40-step return sums past an episode end
    ends = buffer.terminated[:, 0] | buffer.truncated[:, 0]
    assert torch.nonzero(ends).squeeze(1).tolist() == [24, 49, 74, 99]
    batch = buffer.sample(512, n_step=40, gamma=1.0)
    per_episode = torch.tensor(t["reward"]).reshape(4, 25)
    suffix_max = per_episode.flip(1).cumsum(1).flip(1).max()
    assert batch.reward.max() <= suffix_max + 1e-4
    with pytest.raises(KeyError, match=r"agent\.critic_obs=policy"):
        demo_replay(reach_demos, {"policy": 21, "critic": 30}, 6)
    with pytest.raises(ValueError, match="has 21 values, the env 20"):
        demo_replay(reach_demos, {"policy": 20}, 6)

def test_rlpd_maps_demo_actions_into_its_box_with_the_env_bounds(reach_demos: Path) -> None:
    """Demo actions are stored in env units; an agent on an env with bounds [-2, 2] halves them (not clamps)."""
    raw = torch.as_tensor(demo_transitions(reach_demos)["action"])
    spec = EnvSpec(num_envs=1, observation_dims={"policy": 21}, action_dim=6,
                   action_low=torch.full((6,), -2.0), action_high=torch.full((6,), 2.0))
    agent = make_agent(RLPDConfig(demos=str(reach_demos), critic_obs="policy", batch_size=8, buffer_size=100),
                       LayerNormEnsembleCriticConfig(hidden_dims=[16, 16]), spec)
    torch.testing.assert_close(agent.demo_source.buffer.action[:, 0], raw / 2.0)
    torch.testing.assert_close(agent.to_env_action(agent.demo_source.buffer.action[:, 0]), raw)


def test_layer_norm_critic_is_scale_invariant() -> None:
    critic = make_critic(LayerNormEnsembleCriticConfig(num_members=3, hidden_dims=[32, 32]),
                         CriticSpec(obs_dim=5, action_dim=2))
    obs, act = torch.randn(8, 5), torch.randn(8, 2)
    before = critic.estimates(obs, act)
    assert before.shape == (3, 8, 1)
    with torch.no_grad():  # LayerNorm undoes any scaling of a hidden layer's pre-activations
        critic.members.weights[0].mul_(50.0)
        critic.members.biases[0].mul_(50.0)
    torch.testing.assert_close(critic.estimates(obs, act), before, atol=1e-4, rtol=1e-4)


def make_rlpd(demos: Path, env: object, **kwargs: object) -> RLPD:
    cfg = RLPDConfig(demos=str(demos), learning_starts=16, batch_size=32, buffer_size=2000, **kwargs)
    return make_agent(cfg, LayerNormEnsembleCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))


def test_tiny_rlpd_run_and_checkpoint_round_trip(reach_demos: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    env = sim.make_env("so101_reach", num_envs=4, seed=0, **SHORT)
    agent = make_rlpd(reach_demos, env, normalize_obs=True)
    assert agent.critic_group == "policy" and set(agent.buffer.obs) == {"policy"}  # demos hold no critic obs
    assert agent.demo_transitions == 100 and int(agent.normalizers["policy"].count) == 100  # demo stats folded in
    _, metrics = drive(agent, env, 12)
    assert metrics["train/updates"] > 0 and all(np.isfinite(float(v)) for v in metrics.values())
    path = save_checkpoint(tmp_path / "run", agent.env_steps, agent.state_dict())
    _, state = load_checkpoint(path)
    assert state["demos"] == {"path": str(reach_demos), "transitions": 100}
    assert "demos" not in state["buffer"]  # the demo data is not in the checkpoint
    again = make_rlpd(reach_demos, env, normalize_obs=True)
    again.load_state_dict(state)
    probe = torch.randn(5, 21)
    torch.testing.assert_close(again.policy()(probe), agent.policy()(probe))
    assert again.env_steps == agent.env_steps and len(again.buffer) == len(agent.buffer)
    state["demos"]["transitions"] = 99
    with pytest.raises(ValueError, match="trained with 99 demo transitions"):
        again.load_state_dict(state)


def test_bc_initialised_actor(reach_demos: Path, tmp_path: Path) -> None:
    env = sim.make_env("so101_reach", num_envs=2, seed=0, **SHORT)
    clone_demos(reach_demos, tmp_path / "bc", "--actor", "gaussian", "--hidden-dims", "64", "64", "--epochs", "3")
    result = load_clone(tmp_path / "bc", 21, 6)
    agent = make_rlpd(reach_demos, env, normalize_obs=True, actor_hidden_dims=[64, 64],
                      bc_checkpoint=str(tmp_path / "bc"))
    probe = torch.randn(5, 21)
    with torch.no_grad():
        expected = result.actor(result.normalizer(probe))
    torch.testing.assert_close(agent.policy()(probe), expected)
    assert agent.normalizers["policy"].until == int(result.normalizer.count)  # frozen at the BC statistics
    # bc_weight: the actor's objective on the demo rows (first half) loses bc_weight * ||a - a_demo||^2
    weighted = make_rlpd(reach_demos, env, bc_weight=3.0)
    critic_obs, action = torch.randn(4, 21), torch.rand(4, 6) * 2 - 1
    plain = weighted.actor_q(critic_obs, action)
    weighted._anchor = torch.zeros(2, 6)
    penalised = weighted.actor_q(critic_obs, action)
    torch.testing.assert_close(penalised[:2], plain[:2] - 3.0 * action[:2].pow(2).sum(-1))
    torch.testing.assert_close(penalised[2:], plain[2:])
    with pytest.raises(ValueError, match=r"set agent\.normalize_obs=true"):
        make_rlpd(reach_demos, env, actor_hidden_dims=[64, 64], bc_checkpoint=str(tmp_path / "bc"))
    with pytest.raises(ValueError, match="rlpd needs a gaussian one"):
        make_rlpd(reach_demos, env, normalize_obs=True, bc_checkpoint=str(tmp_path / "bc"))
    with pytest.raises(ValueError, match="agent=rlpd needs demonstrations"):
        make_agent(RLPDConfig(), LayerNormEnsembleCriticConfig(), EnvSpec.from_env(env))
    with pytest.raises(FileNotFoundError, match="is not a LeRobot dataset"):
        make_rlpd(tmp_path, env)


def test_train_command_with_rlpd(reach_demos: Path, tmp_path: Path) -> None:
    from robot_rl.cli import main

    run = tmp_path / "run"
    assert main(["train", "task.name=so101_reach", "task.num_envs=4", "task.total_steps=200", "agent=rlpd",
                 f"agent.demos={reach_demos}", "agent.learning_starts=40",
                 "agent.batch_size=32", "agent.buffer_size=2000", "agent.iteration_steps=100", "eval_episodes=2",
                 "export_formats=[]", "logger=none", "logger.progress=false", f"hydra.run.dir={run}",
                 "+task.env.episode_s=1.0"]) == 0
    from robot_rl.train.run_loading import open_run

    runner = open_run(run, num_envs=4)  # the saved online buffer is [capacity, 4 envs]
    assert isinstance(runner.agent, RLPD) and runner.env_steps == 200 and runner.agent.updates > 0
    assert isinstance(runner.agent.critic, LayerNormEnsembleCritic)  # agent=rlpd alone selects critic=ensemble_ln


def test_critic_warmup_freezes_the_actor_and_bc_weight_decays(reach_demos: Path) -> None:
    torch.manual_seed(0)
    env = sim.make_env("so101_reach", num_envs=2, seed=0, **SHORT)
    agent = make_rlpd(reach_demos, env, bc_weight=8.0, critic_warmup_updates=2, bc_decay_updates=4)
    schedule = []
    for _ in range(8):
        schedule.append(agent.bc_weight_now())
        agent.updates += 1
    assert schedule == [8.0, 8.0, 8.0, 6.0, 4.0, 2.0, 0.0, 0.0]  # constant through the warm-up, then linear to 0
    agent.updates = 0
    obs = env.reset(seed=0)
    for _ in range(8):  # a few online rows for the online half of each batch
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
    actor = [p.detach().clone() for p in agent.actor.parameters()]
    critic = [p.detach().clone() for p in agent.critic.parameters()]
    alpha = float(agent.alpha)
    for _ in range(2):  # warm-up: the critic learns, actor and temperature stay
        metrics = agent.learn(agent.sample_batch())
        agent.updates += 1
        assert "loss/actor" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(actor, agent.actor.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(critic, agent.critic.parameters(), strict=True))
    assert float(agent.alpha) == alpha
    metrics = agent.learn(agent.sample_batch())  # the first actor step, with the full BC weight
    assert not all(torch.equal(a, b) for a, b in zip(actor, agent.actor.parameters(), strict=True))
    assert metrics["train/bc_weight"] == 8.0 and metrics["train/bc_mse"] > 0
    for key in ("critic_warmup_updates", "bc_decay_updates"):
        with pytest.raises(ValueError, match=rf"agent\.{key}( = -1:)? must be (an integer )?>= 0"):
            RLPDConfig(demos=str(reach_demos), **{key: -1})


def test_backup_entropy_off_leaves_log_pi_out_of_the_target(reach_demos: Path) -> None:
    env = sim.make_env("so101_reach", num_envs=2, seed=0, **SHORT)
    soft, hard = (make_rlpd(reach_demos, env, backup_entropy=flag, init_alpha=0.5) for flag in (True, False))
    hard.load_state_dict(soft.state_dict())
    torch.manual_seed(1)
    batch = hard.demo_source.buffer.sample(16)
    torch.manual_seed(2)
    with_entropy = soft.critic_target(batch)
    torch.manual_seed(2)  # the same next actions
    without = hard.critic_target(batch)
    torch.manual_seed(2)
    log_prob = soft.actor.sample(batch.next_obs["policy"])[1]
    torch.testing.assert_close(with_entropy - without,
                               -0.5 * batch.discount.unsqueeze(-1) * log_prob.unsqueeze(-1), rtol=1e-4, atol=1e-5)
    assert (batch.discount > 0).any() and (with_entropy != without).any()


def test_bc_anchor_clone_pulls_every_row_to_the_frozen_clone(reach_demos: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    env = sim.make_env("so101_reach", num_envs=2, seed=0, **SHORT)
    clone_demos(reach_demos, tmp_path / "bc", "--actor", "gaussian", "--hidden-dims", "64", "64", "--epochs", "3")
    result = load_clone(tmp_path / "bc", 21, 6)
    agent = make_rlpd(reach_demos, env, normalize_obs=True, actor_hidden_dims=[64, 64], bc_weight=2.0,
                      bc_anchor="clone", bc_checkpoint=str(tmp_path / "bc"))
    assert agent.bc_prior is not None and not any(p.requires_grad for p in agent.bc_prior.parameters())
    obs = env.reset(seed=0)
    for _ in range(8):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
    batch = agent.sample_batch()
    seen = {}
    original = agent.actor_q

    def spy(critic_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        seen["anchor"] = agent._anchor.clone()
        return original(critic_obs, action)

    agent.actor_q = spy
    agent.learn(batch)
    with torch.no_grad():  # every row (demo and online) is pulled to the clone's action, not to the demo action
        torch.testing.assert_close(seen["anchor"], result.actor(batch.obs["policy"]))
    moved = agent.actor(batch.obs["policy"]) - agent.bc_prior(batch.obs["policy"])
    assert moved.abs().max() > 0  # the actor learns; the prior stays the clone
    with pytest.raises(ValueError, match=r"bc_anchor=clone needs agent\.bc_checkpoint"):
        RLPDConfig(demos=str(reach_demos), bc_anchor="clone")
    with pytest.raises(ValueError, match=r"agent\.bc_anchor must be one of"):
        RLPDConfig(demos=str(reach_demos), bc_anchor="prior")
