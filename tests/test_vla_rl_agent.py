"""agent=vla_rl (dsrl, best_of_n) and agent=vla_ppo: chunk transitions by hand, the steered policy, chunk-level GAE
by hand, training and resume through the command, export, bad input. One tiny so101_reach_lang dataset (6 scripted
episodes of 1 s, front camera at 32x32) and a 10-step SFT run are made per module; the VLA is real, the env is real
MuJoCo with rendered cameras."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from robot_rl.checkpoint import latest_checkpoint, load_checkpoint
from robot_rl.compose import compose
from robot_rl.data.chunk_transitions import ChunkTransitionBuffer
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.errors import InputError
from robot_rl.math import flow_sde
from robot_rl.models.vla import flow
from robot_rl.models.vla.model import Context, keypoint_loss
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.render

SFT = ["agent=vla", "task=so101_reach_lang", "task.env.cameras=[front]", "task.env.image_size=32",
       "task.env.camera_obs=false", "+task.env.episode_s=1.0", "task.num_envs=4", "agent.cameras=[front]",
       "agent.chunk_len=4", "agent.execute_len=2", "agent.batch_size=16", "agent.warmup_updates=0",
       "agent.log_interval=10", "agent.updates=10", "eval_episodes=0", "export_formats=[]", "sim.num_threads=1",
       "logger=none"]
RL = ["agent=vla_rl", "task=so101_reach_lang", "task.env.cameras=[front]", "task.env.image_size=32",
      "task.env.camera_obs=false", "+task.env.episode_s=1.0", "task.num_envs=4", "agent.learning_starts=8",
      "agent.batch_size=16", "agent.iteration_steps=40", "checkpoint_interval=1", "eval_episodes=0",
      "export_formats=[]", "sim.num_threads=1", "logger=none"]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vla_rl") / "reach_lang"
    record("so101_reach_lang", expert_policy, root, 6, None, num_envs=3, seed=0,
           overrides={"episode_s": 1.0, "cameras": ["front"], "image_size": 32})
    run = root.parent / "sft"
    Runner(compose([*SFT, f"agent.dataset={root}"]), run).learn(evaluate_and_export=False)
    return run


def rl_config(sft_run: Path, *extra: str):
    return compose([*RL, f"agent.policy={sft_run}", *extra])


def check_first_rollout(agent, check) -> list[bool]:
    """Make ``agent.update`` run ``check(batch)`` on its first rollout (all transitions concatenated) before updating;
    the list returned holds True once the check ran."""
    original_update, checked = agent.update, []

    def update_after_checking():
        if not checked:
            check({k: torch.cat([r[k] for r in agent.rollout]) for k in agent.rollout[0]})
            checked.append(True)
        return original_update()

    agent.update = update_after_checking
    return checked


def test_the_buffer_keeps_the_newest_rows_and_round_trips() -> None:
    buffer = ChunkTransitionBuffer(3, obs_dim=1, action_dim=2)
    for k in range(4):  # the 4th row overwrites the 1st
        buffer.add(torch.tensor([[float(k)]]), torch.full((1, 2), float(k)), torch.tensor([k * 1.0]),
                   torch.tensor([0.5]), torch.tensor([[k + 1.0]]))
    assert len(buffer) == 3 and sorted(buffer.store["obs"][:, 0].tolist()) == [1.0, 2.0, 3.0]
    batch = buffer.sample(64, torch.Generator().manual_seed(0))
    assert torch.equal(batch.next_obs, batch.obs + 1) and torch.equal(batch.action[:, 0], batch.reward)
    copy = ChunkTransitionBuffer(3, 1, 2)
    copy.load_state_dict(buffer.state_dict())
    assert all(torch.equal(copy.store[k], buffer.store[k]) for k in buffer.store) and copy.cursor == buffer.cursor


def test_a_chunks_return_and_discount_are_summed_by_hand(sft_run: Path, tmp_path: Path) -> None:
    """execute_len 2, gamma 0.5: rewards 1 then 2 give R = 1 + 0.5 * 2 = 2 and discount 0.25 once the next chunk
    is queried (its feature is the successor); an episode that ends in the chunk stores discount 0 at once."""
    agent = Runner(rl_config(sft_run, "agent.gamma=0.5"), tmp_path / "run").agent
    n = agent.env.num_envs
    agent.act({})
    first_obs = agent.obs_at.clone()
    assert agent.pending.all() and len(agent.buffer) == 0

    def step(reward: float, ended: bool = False) -> SimpleNamespace:
        done = torch.tensor([ended] + [False] * (n - 1))
        return SimpleNamespace(reward=torch.full((n,), reward), terminated=done, truncated=torch.zeros(n, dtype=bool))

    agent.observe({}, None, step(1.0))
    agent.act({})
    agent.observe({}, None, step(2.0, ended=True))  # env 0's episode ends here
    assert len(agent.buffer) == 1
    stored = agent.buffer.store
    assert stored["reward"][0].item() == pytest.approx(2.0) and stored["discount"][0].item() == 0.0
    agent.act({})  # envs 1.. query their next chunk: their transitions are complete
    assert len(agent.buffer) == n
    assert stored["reward"][1:n].tolist() == pytest.approx([2.0] * (n - 1))
    assert stored["discount"][1:n].tolist() == pytest.approx([0.25] * (n - 1))
    assert torch.equal(stored["obs"][1:n], first_obs[1:])
    assert torch.equal(stored["next_obs"][1:n], agent.obs_at[1:])
    assert stored["next_obs"][1:n, -1].tolist() == pytest.approx([2 / agent.env.max_episode_steps] * (n - 1))
    assert torch.equal(stored["action"][1:n], stored["action"][1:n].clamp(-1.5, 1.5))  # the noise, bounded


def test_the_steered_policy_plays_the_actors_noise_and_ignores_its_noise_input(sft_run: Path, tmp_path: Path) -> None:
    from robot_rl.models.vla.steering import context_feature

    agent = Runner(rl_config(sft_run), tmp_path / "run").agent
    with torch.no_grad():
        agent.actor.net[-1].bias.normal_()  # a non-zero steering
    policy = agent.policy()
    images = (torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),)
    tokens, mask = policy.encode_text(["reach the red target", "touch the blue sphere"])
    state = torch.zeros(2, 6)
    with torch.no_grad():
        a = policy(images, tokens, mask, state, torch.zeros(2, 4, 6))
        b = policy(images, tokens, mask, state, torch.randn(2, 4, 6))
        obs = {"images": {"front": images[0]}, "tokens": tokens, "token_mask": mask, "state": state}
        noise = agent.actor(context_feature(agent.sft.model.encode(obs)))
        steered = agent.sft.model.sample(obs, noise).clamp(-1, 1)
        unsteered = agent.sft.model.sample(obs, torch.zeros_like(noise)).clamp(-1, 1)
    assert torch.equal(a, b) and torch.allclose(a, steered, atol=1e-6)
    assert not torch.allclose(a, unsteered, atol=1e-3)
    assert all(not p.requires_grad for p in agent.sft.parameters())  # the VLA is frozen


@pytest.mark.slow
def test_training_through_the_command_learns_and_resumes(sft_run: Path, tmp_path: Path) -> None:
    """240 env steps with 4 envs: SAC steps after the warm-up, finite losses logged; a resumed run keeps the
    replay, the actor and the counters and goes on to its new budget."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", *RL, f"agent.policy={sft_run}", f"hydra.run.dir={run}"]
    done = subprocess.run([*cmd, "task.total_steps=240"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "loss/critic" in r]
    assert learned and all(torch.isfinite(torch.tensor([r["loss/critic"], r["loss/actor"]])).all() for r in learned)
    state = load_checkpoint(latest_checkpoint(run))[1]["agent"]
    assert state["num_updates"] > 0 and state["buffer"]["size"] == state["chunks_collected"] >= 100
    resumed = Runner(compose([*RL, f"agent.policy={sft_run}", "task.total_steps=320"]), run, resume=True)
    assert resumed.agent.num_updates == state["num_updates"] and len(resumed.agent.buffer) == state["buffer"]["size"]
    assert all(torch.equal(v, state["actor"][k]) for k, v in resumed.agent.actor.state_dict().items())
    resumed.learn(evaluate_and_export=False)
    assert resumed.env_steps >= 320 and resumed.agent.num_updates > state["num_updates"]

    # export: the same VLA artifact as SFT, the steering actor inside the graph (its noise input is ignored)
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(run), "--format", "onnx"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import onnxruntime as ort

    session = ort.InferenceSession(str(run / "policy" / "policy.onnx"))
    policy = resumed.agent.policy()
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    tokens, mask = policy.encode_text(["reach the red target", "go to the green one"])
    state_in = torch.zeros(2, 6)
    feeds = {"image_front": images.numpy(), "tokens": tokens.numpy(), "token_mask": mask.numpy(),
             "state": state_in.numpy()}
    zero, noisy = (session.run(None, {**feeds, "noise": n.numpy()})[0] for n in (torch.zeros(2, 4, 6),
                                                                                    torch.randn(2, 4, 6)))
    assert abs(zero - noisy).max() < 1e-6
    with torch.no_grad():
        chunk = policy((images,), tokens, mask, state_in, torch.zeros(2, 4, 6))  # [-1, 1]; the graph: joint targets
    assert zero.shape == (2, 24) and torch.isfinite(chunk).all()

    # the critic report compares Q at chunk starts with complete returns (no time-limit tail)
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "critic-report", str(run), "--episodes", "2",
                           "--latest-only"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = (run / "critic_report" / "report.md").read_text()
    assert "values at chunk starts only" in report and "the critic's value ends at the time limit" in report
    assert (run / "critic_report" / "values_vs_returns.png").stat().st_size > 0


class HandCritic(torch.nn.Module):
    """A critic by hand for the ranking test: ``Q(obs, w) = -|w - 0.3|^2`` (the same for every member)."""

    def forward(self, obs, action, reduce="min", target=False):
        return -(action - 0.3).pow(2).sum(1, keepdim=True)


def test_best_of_n_keeps_the_candidate_the_critic_ranks_highest(sft_run: Path, tmp_path: Path) -> None:
    """Candidates: the actor's noise and 7 draws of N(0, 1) clipped to the bound; with Q = -|w - 0.3|^2 the kept
    noise is the candidate nearest 0.3, its value the maximum, never below the actor's own."""
    agent = Runner(rl_config(sft_run, "agent.method=best_of_n", "agent.num_candidates=8"), tmp_path / "run").agent
    agent.critic = HandCritic()
    feature = torch.randn(5, agent.feature_dim)
    critic_obs = torch.cat([feature, torch.zeros(5, 1)], dim=1)
    state = agent.generator.get_state()
    noise, value, actor_value, decoded = agent.best_noise(critic_obs, feature)
    assert decoded is None  # the noise critic decodes nothing
    agent.generator.set_state(state)
    drawn = torch.randn(5, 7, agent.noise_dim, generator=agent.generator).clamp(-1.5, 1.5)
    with torch.no_grad():
        candidates = torch.cat([agent.actor(feature).flatten(1).unsqueeze(1), drawn], dim=1)  # [5, 8, H*A]
    scores = -(candidates - 0.3).pow(2).sum(-1)
    best = scores.argmax(1)
    assert torch.allclose(noise, candidates[torch.arange(5), best])
    assert torch.allclose(value, scores.max(1).values) and torch.allclose(actor_value, scores[:, 0])
    assert (value >= actor_value).all()


def train_160_steps(sft_run: Path, run: Path, *extra: str) -> list[dict]:
    """``robot-rl train agent=vla_rl`` for 160 env steps into ``run``; the log rows with a critic loss."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", *RL, f"agent.policy={sft_run}", *extra,
                           "task.total_steps=160", f"hydra.run.dir={run}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss/critic" in r]


def test_best_of_n_trains_through_the_command(sft_run: Path, tmp_path: Path) -> None:
    """method=best_of_n: finite critic and distillation losses, a best candidate at least as good as the actor's."""
    run = tmp_path / "run"
    learned = train_160_steps(sft_run, run, "agent.method=best_of_n")
    assert learned and all(torch.isfinite(torch.tensor([r["loss/critic"], r["loss/actor"], r["best_gain"]])).all()
                           for r in learned)
    assert all(r["best_gain"] >= 0.0 for r in learned)
    assert load_checkpoint(latest_checkpoint(run))[1]["agent"]["num_updates"] > 0


def test_bad_input_is_a_clear_input_error(sft_run: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"agent\.policy"):
        Runner(compose([*RL]), tmp_path / "a")
    with pytest.raises(InputError, match="cameras and instructions"):
        Runner(rl_config(sft_run, "task.env.cameras=[]"), tmp_path / "b")
    with pytest.raises(InputError, match="execute_len"):
        Runner(rl_config(sft_run, "agent.execute_len=9"), tmp_path / "c")
    with pytest.raises(ValueError, match="method"):
        rl_config(sft_run, "agent.method=flow_ppo")
    with pytest.raises(ValueError, match="num_candidates"):
        rl_config(sft_run, "agent.method=best_of_n", "agent.num_candidates=0")


@pytest.fixture(scope="module")
def mlp_sft(sft_run: Path, tmp_path_factory) -> Path:
    """A 10-step SFT run of an MLP expert (it reads the global condition alone) on the module's dataset."""
    config = yaml.safe_load((sft_run / "config.yaml").read_text())
    run = tmp_path_factory.mktemp("mlp") / "mlp_sft"
    Runner(compose([*SFT, f"agent.dataset={config['agent']['dataset']}", "agent.global_condition=true",
                    "agent.action_expert=mlp"]), run).learn(evaluate_and_export=False)
    return run


def test_a_chunk_critic_scores_the_decoded_chunk_and_steers_through_the_frozen_flow(mlp_sft: Path,
                                                                                  tmp_path: Path) -> None:
    """critic_input=chunk: the critic reads the executed part (2 of 4 steps x 6 actions) of the standardised chunk the
    VLA decoded; the replayed feature decodes the same chunk; the actor's gradient reaches it through the VLA, whose
    parameters get none (a SAC step moves the actor only); best-of-N ranks the candidates by their decoded chunks."""
    agent = Runner(rl_config(mlp_sft, "agent.critic_input=chunk", "agent.method=best_of_n"), tmp_path / "run").agent
    assert agent.critic.spec.action_dim == 12 and agent.buffer.store["action"].shape[1] == 12
    agent.act({}, deterministic=True)
    feature = agent.obs_at[:, :-1]
    with torch.no_grad():
        noise = agent.actor(feature)
        x0 = agent.sft.model.denoise(agent.condition_context(agent.obs_at), noise)
    assert torch.allclose(agent.scored_at, x0[:, :2].flatten(1), atol=1e-5)
    assert not torch.allclose(agent.scored(agent.obs_at, noise), agent.scored(agent.obs_at, noise + 0.5))

    sampled = agent.actor.sample(feature)[0]
    q = agent.critic(agent.obs_at, agent.scored(agent.obs_at, sampled), reduce="min")
    q.sum().backward()
    assert sum(p.grad.abs().sum() for p in agent.actor.parameters()) > 0
    assert all(p.grad is None for p in agent.sft.parameters())

    for _ in range(4):  # replay rows, then one SAC step: finite losses, the actor moves, the VLA does not
        agent.buffer.add(agent.obs_at, agent.scored_at, torch.rand(4), torch.full((4,), 0.9), agent.obs_at)
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    vla_before = [p.detach().clone() for p in agent.sft.parameters()]
    metrics = agent._sac_step()
    assert all(torch.isfinite(metrics[k]) for k in ("loss/critic", "loss/actor", "entropy"))
    assert any(not torch.equal(a, p) for a, p in zip(actor_before, agent.actor.parameters(), strict=True))
    assert all(torch.equal(a, p) for a, p in zip(vla_before, agent.sft.parameters(), strict=True))

    agent.critic = HandCritic()  # Q = -|x - 0.3|^2 over the decoded executed chunk
    state = agent.generator.get_state()
    best, value, actor_value, decoded = agent.best_noise(agent.obs_at, feature)
    agent.generator.set_state(state)
    with torch.no_grad():  # the kept candidate's chunk, decoded once: what choose() plays
        assert torch.allclose(decoded, agent.sft.model.denoise(agent.condition_context(agent.obs_at),
                                                               best.view(4, *agent.chunk_shape)), atol=1e-5)
    assert (value >= actor_value).all()
    drawn = torch.randn(4, 7, agent.noise_dim, generator=agent.generator).clamp(-1.5, 1.5)
    with torch.no_grad():
        candidates = torch.cat([agent.actor(feature).flatten(1).unsqueeze(1), drawn], dim=1)  # [4, 8, H*A]
        chunks = torch.stack([agent.scored(agent.obs_at, candidates[:, i]) for i in range(8)], dim=1)
    scores = -(chunks - 0.3).pow(2).sum(-1)
    assert torch.allclose(best, candidates[torch.arange(4), scores.argmax(1)])
    assert torch.allclose(value, scores.max(1).values, atol=1e-5)

    decodes = []  # collecting past learning_starts: every candidate decoded once to rank it, the pick not again
    denoise = agent.sft.model.denoise
    agent.sft.model.denoise = lambda context, noise: decodes.append(len(noise)) or denoise(context, noise)
    agent.cfg.learning_starts, agent.left[:] = 0, 0
    agent.act({}, deterministic=False)
    assert decodes == [4 * 8]


@pytest.mark.slow
def test_dsrl_with_a_chunk_critic_trains_through_the_command(mlp_sft: Path, tmp_path: Path) -> None:
    """160 env steps: SAC steps on the chunk critic with finite losses and a chunk-wide replay."""
    run = tmp_path / "run"
    learned = train_160_steps(mlp_sft, run, "agent.critic_input=chunk")
    assert learned and all(torch.isfinite(torch.tensor([r["loss/critic"], r["loss/actor"], r["entropy"]])).all()
                           for r in learned)
    state = load_checkpoint(latest_checkpoint(run))[1]["agent"]
    assert state["num_updates"] > 0 and state["buffer"]["action"].shape[1] == 12


def test_bad_critic_input_is_a_clear_error(sft_run: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"agent\.critic_input=chunk replays") as caught:
        Runner(rl_config(sft_run, "agent.critic_input=chunk"), tmp_path / "a")  # the module's SFT: transformer expert
    assert "agent.action_expert=mlp" in str(caught.value) and "agent.critic_input=noise" in str(caught.value)
    with pytest.raises(ValueError, match="critic_input"):
        rl_config(sft_run, "agent.critic_input=action")


# ---------------------------------------------------------------- agent=vla_ppo (flow PPO on the action expert)
PPO = [a for a in RL if not a.startswith(("agent.learning_starts", "agent.batch_size"))]


def ppo_config(sft_run: Path, *extra: str):
    return compose([*PPO, "agent=vla_ppo", f"agent.policy={sft_run}", *extra])


def test_flow_ppo_chunk_gae_by_hand(sft_run: Path, tmp_path: Path) -> None:
    """lam 0.5. Env 0: a chunk (R 1, V 0.5, discount 0.25, V' 0.5) then one that ends the episode (R 2, V 0.5):
    deltas 1 + 0.25 * 0.5 - 0.5 = 0.625 and 2 - 0.5 = 1.5, A = 0.625 + 0.25 * 0.5 * 1.5 = 0.8125 and 1.5. Env 1:
    one chunk (R 3, V 1, V' 2): A = 3 + 0.25 * 2 - 1 = 2.5."""
    agent = Runner(ppo_config(sft_run, "agent.lam=0.5"), tmp_path / "run").agent
    batch = {"env": torch.tensor([0, 1, 0]), "reward": torch.tensor([1.0, 3.0, 2.0]),
             "value": torch.tensor([0.5, 1.0, 0.5]), "next_value": torch.tensor([0.5, 2.0, 9.0]),
             "discount": torch.tensor([0.25, 0.25, 0.0])}
    advantages, returns = agent.advantages(batch)
    assert advantages.tolist() == pytest.approx([0.8125, 2.5, 1.5])
    assert returns.tolist() == pytest.approx([1.3125, 3.5, 2.0])


@pytest.mark.slow
def test_flow_ppo_trains_the_expert_only_through_the_command_and_exports(sft_run: Path, tmp_path: Path) -> None:
    """240 env steps, a PPO update every 32 chunk transitions: finite losses; the expert moved, the prefix did not;
    a resumed run goes on; the run exports the same VLA artifact kind."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", *PPO, "agent=vla_ppo", f"agent.policy={sft_run}",
           "agent.rollout_chunks=32", "agent.minibatches=2", "agent.epochs=2", "agent.expert_lr=1e-3",
           f"hydra.run.dir={run}"]
    done = subprocess.run([*cmd, "task.total_steps=240"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "loss/policy" in r]
    assert learned and all(torch.isfinite(torch.tensor([r["loss/policy"], r["loss/value"], r["approx_kl"]])).all()
                           for r in learned)
    state = load_checkpoint(latest_checkpoint(run))[1]["agent"]
    assert state["num_updates"] >= 2
    fresh = Runner(ppo_config(sft_run), tmp_path / "fresh").agent
    sft = fresh.sft.model.state_dict()
    trained = {id(p) for p in fresh.model.expert_parameters()}
    expert = {n for n, p in fresh.model.named_parameters() if id(p) in trained}
    moved = {n for n in expert if not torch.equal(state["model"][n], sft[n])}
    assert moved and all(torch.equal(state["model"][n], sft[n]) for n in sft if n not in expert)
    resumed = Runner(ppo_config(sft_run, "task.total_steps=320"), run, resume=True)
    assert resumed.agent.num_updates == state["num_updates"]
    resumed.learn(evaluate_and_export=False)
    assert resumed.env_steps >= 320
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(run), "--format", "onnx"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    from robot_rl.deploy.artifact import load_meta

    assert load_meta(run / "policy").inputs == "vla"


def test_flow_ppo_bad_input_is_a_clear_input_error(sft_run: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"agent=vla_ppo needs the SFT run"):
        Runner(compose([*PPO, "agent=vla_ppo"]), tmp_path / "a")
    with pytest.raises(ValueError, match="critic"):
        ppo_config(sft_run, "critic=ensemble")
    with pytest.raises(ValueError, match="noise_level"):
        ppo_config(sft_run, "agent.noise_level=0")


def test_flow_ppo_keeps_the_demonstrations_in_its_loop(sft_run: Path, tmp_path: Path) -> None:
    """``agent.demo_coef``: the expert's flow-matching loss on the SFT run's own demonstrations (the BC anchor) is the
    VLA's loss on frames drawn as SFT drew them; it trains beside PPO (``loss/demo`` logged, finite); the SFT run's
    dataset gone is a clear error that names the fix (the run still opens without the anchor)."""
    agent = Runner(ppo_config(sft_run, "agent.demo_coef=2.0", "agent.demo_batch=16"), tmp_path / "probe").agent
    state = agent.generator.get_state()
    loss = agent.demo_losses()["flow"]
    agent.generator.set_state(state)
    batch = agent.demos.sample(16, agent.generator, agent.demo_weights)
    noise = torch.randn(batch["action"].shape, generator=agent.generator)
    t = flow.sample_time(16, agent.generator)
    expected = agent.sft.model.losses(batch, batch["action"], noise, t, batch["action_is_pad"])["flow"]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5) and loss.requires_grad

    run = tmp_path / "run"
    runner = Runner(ppo_config(sft_run, "agent.demo_coef=1.0", "agent.demo_batch=16", "agent.rollout_chunks=32",
                               "agent.minibatches=2", "agent.epochs=1", "task.total_steps=160"), run)
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    demo = [r["loss/demo"] for r in rows if "loss/demo" in r]
    assert demo and all(0 < d < float("inf") for d in demo)

    moved = tmp_path / "moved"
    shutil.copytree(sft_run, moved / "sft")
    config = yaml.safe_load((moved / "sft" / "config.yaml").read_text())
    config["agent"]["dataset"] = str(moved / "gone")
    (moved / "sft" / "config.yaml").write_text(yaml.safe_dump(config))
    Runner(ppo_config(moved / "sft"), tmp_path / "plain")  # opens on the kept description
    with pytest.raises(InputError, match="demonstrations are not there") as err:
        Runner(ppo_config(moved / "sft", "agent.demo_coef=1.0"), tmp_path / "anchored")
    assert "demo_coef=0" in str(err.value)


def test_flow_ppo_policy_coef_zero_collects_and_values_without_moving_the_vla(sft_run: Path, tmp_path: Path) -> None:
    """``agent.policy_coef=0`` (the ablation without the policy gradient): with no demonstration or keypoint loss
    either, updates run (the value critic learns) and the VLA's weights stay exactly as SFT left them; a negative
    weight is refused."""
    runner = Runner(ppo_config(sft_run, "agent.policy_coef=0", "agent.rollout_chunks=32", "agent.minibatches=2",
                               "agent.epochs=1", "agent.expert_lr=1e-3", "task.total_steps=160"), tmp_path / "run")
    agent = runner.agent
    model_before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    critic_before = {k: v.clone() for k, v in agent.critic.state_dict().items()}
    runner.learn(evaluate_and_export=False)
    assert agent.num_updates > 0
    assert all(torch.equal(model_before[n], v) for n, v in agent.model.state_dict().items())
    assert any(not torch.equal(critic_before[n], v) for n, v in agent.critic.state_dict().items())
    with pytest.raises(ValueError, match="policy_coef"):
        ppo_config(sft_run, "agent.policy_coef=-1")


def test_flow_ppo_self_imitation_regresses_onto_the_chunks_with_a_positive_advantage(sft_run: Path,
                                                                                     tmp_path: Path) -> None:
    """``agent.self_imitation_coef``: the loss is the expert's flow-matching loss from fresh noise on the executed
    steps (2 of 4) of the chunks whose advantage is positive, the others weighing nothing; through the command (no
    PPO, no demonstrations) it alone moves the expert and is logged with the share of chunks it kept."""
    runner = Runner(ppo_config(sft_run, "agent.policy_coef=0", "agent.self_imitation_coef=1.0",
                               "agent.rollout_chunks=32", "agent.minibatches=2", "agent.epochs=1",
                               "agent.expert_lr=1e-3", "task.total_steps=160"), tmp_path / "run")
    agent = runner.agent
    context = Context(torch.randn(3, 5, agent.model.config.width), torch.zeros(3, 5, dtype=torch.bool))
    chunks, advantages = torch.randn(3, 4, 6), torch.tensor([0.5, -0.2, 1.0])
    state = agent.generator.get_state()
    with torch.no_grad():
        loss = agent._self_imitation_loss(context, chunks, advantages)
        agent.generator.set_state(state)
        noise = torch.randn(chunks.shape, generator=agent.generator)
        t = flow.sample_time(3, agent.generator)
        err = (agent.model.velocity(flow.interpolate(chunks, noise, t), t, context) - (noise - chunks)).pow(2)
    assert loss.item() == pytest.approx(err[[0, 2], :2].mean().item(), rel=1e-5)

    model_before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "loss/self_imitation" in r]
    assert learned and all(0 < r["self_imitation_share"] < 1 and math.isfinite(r["loss/self_imitation"])
                           for r in learned)
    assert any(not torch.equal(model_before[n], v) for n, v in agent.model.state_dict().items())
    with pytest.raises(ValueError, match="self_imitation_coef"):
        ppo_config(sft_run, "agent.self_imitation_coef=-1")


def test_flow_ppo_with_one_sde_step_scores_the_executed_elements_and_trains(sft_run: Path, tmp_path: Path) -> None:
    """``agent.sde_step=one``: each chunk's chain has one Gaussian step (its index kept), the old likelihood is kept
    per executed action element (``[n, execute_len, A]``) and equals the expert's re-scoring before any update
    (ratio 1); PPO updates run through training with finite losses and move the expert."""
    run = tmp_path / "run"
    runner = Runner(ppo_config(sft_run, "agent.sde_step=one", "agent.rollout_chunks=32", "agent.minibatches=2",
                               "agent.epochs=1", "agent.expert_lr=1e-3", "task.total_steps=160"), run)
    agent = runner.agent
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}

    def rescored_exactly(batch: dict[str, torch.Tensor]) -> None:
        assert batch["element_log_prob"].shape == (len(batch["sde_step"]), agent.execute_len, 6)
        assert ((0 <= batch["sde_step"]) & (batch["sde_step"] < agent.steps)).all()
        context = Context(batch["tokens"], batch["pad"], batch.get("condition"))
        with torch.no_grad():
            again = agent._element_log_prob(context, batch["states"], batch["sde_step"])
        assert torch.allclose(again, batch["element_log_prob"], atol=1e-4)

    checked = check_first_rollout(agent, rescored_exactly)
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "loss/policy" in r]
    assert checked and learned and all(torch.isfinite(torch.tensor([r["loss/policy"], r["approx_kl"]])).all()
                                       for r in learned)
    assert any(not torch.equal(before[n], v) for n, v in agent.model.state_dict().items())
    with pytest.raises(ValueError, match="sde_step"):
        ppo_config(sft_run, "agent.sde_step=two")


def test_flow_ppo_initial_noise_scale_scales_each_chains_start(sft_run: Path, tmp_path: Path) -> None:
    """``agent.initial_noise_scale``: from the same generator state, a chunk's chain starts at exactly half the
    ``N(0, I)`` draws at 0.5 and at zero noise (the deployed policy's) at 0; a negative scale is refused."""
    runner = Runner(ppo_config(sft_run, "agent.rollout_chunks=32"), tmp_path / "run")
    agent, starts = runner.agent, {}
    runner.env.reset(seed=0)
    drawn_from = agent.generator.get_state()
    for scale in (1.0, 0.5, 0.0):
        agent.cfg.initial_noise_scale = scale
        agent.generator.set_state(drawn_from)
        agent.left.zero_()  # every env at a chunk boundary: each draws a new chain
        agent.act(None)
        starts[scale] = agent.pending_rows["states"][:, 0].clone()
    assert starts[1.0].abs().mean() > 0.5  # N(0, I): E|z| = 0.8
    assert torch.allclose(starts[0.5], 0.5 * starts[1.0])
    assert torch.equal(starts[0.0], torch.zeros_like(starts[1.0]))
    with pytest.raises(ValueError, match="initial_noise_scale"):
        ppo_config(sft_run, "agent.initial_noise_scale=-0.5")


@pytest.fixture(scope="module")
def film_sft(sft_run: Path, tmp_path_factory) -> Path:
    """A 10-step SFT run of an ``efficientnet_lite0_film`` VLA (instructed keypoint head, target keypoint loss) on the
    module's dataset."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    config = yaml.safe_load((sft_run / "config.yaml").read_text())
    film = tmp_path_factory.mktemp("film") / "film_sft"
    Runner(compose([*SFT, f"agent.dataset={config['agent']['dataset']}", "agent.image_encoder=efficientnet_lite0_film",
                    "agent.image_keypoints=1", "agent.target_keypoint=1.0", "agent.global_condition=true",
                    "agent.action_expert=mlp", "agent.condition_text=false"]), film).learn(evaluate_and_export=False)
    return film


def test_flow_ppo_with_head_lr_trains_the_keypoint_head_from_the_stored_features(sft_run: Path, film_sft: Path,
                                                                                 tmp_path: Path) -> None:
    """``agent.head_lr``: each chunk keeps the frozen backbone's features, instruction and joints; re-encoding them
    before any update re-scores the stored chains exactly (ratio 1); PPO with the demonstrations (features, not
    cached keypoints) moves the expert, the keypoint head and the condition MLP but never the frozen backbone; a resumed
    run restores the head's optimiser. A VLA without an instructed head is a clear error."""
    with pytest.raises(InputError, match="head_lr") as err:
        Runner(ppo_config(sft_run, "agent.head_lr=1e-3"), tmp_path / "conv")
    assert "efficientnet_lite0_film" in str(err.value)
    film = film_sft
    run = tmp_path / "run"
    extra = ["agent.head_lr=1e-2", "agent.expert_lr=1e-3", "agent.demo_coef=1.0", "agent.demo_batch=16",
             "agent.rollout_chunks=32", "agent.minibatches=2", "agent.epochs=1", "checkpoint_interval=1"]
    runner = Runner(ppo_config(film, *extra, "task.total_steps=160"), run)
    agent = runner.agent
    assert agent.demos.keypoints is None and agent.demos.features  # the head is trained through the demos too
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}

    def rescored_exactly(batch: dict[str, torch.Tensor]) -> None:
        assert "tokens" not in batch and batch["features/front"].shape[1:] == (24, 8, 8)
        with torch.no_grad():
            context = agent.stored_context(batch)
            log_prob = flow_sde.chain_log_prob(agent._velocity(context), batch["states"], agent.cfg.noise_level).sum(1)
        assert torch.allclose(log_prob, batch["log_prob"], atol=1e-3)

    checked = check_first_rollout(agent, rescored_exactly)
    runner.learn(evaluate_and_export=False)
    state = agent.model.state_dict()
    moved = {n for n, v in state.items() if not torch.equal(before[n], v)}
    assert checked and {"image_encoder.logits.weight", "condition.0.weight"} <= moved
    assert any(n.startswith("expert.") for n in moved)
    assert not any(n.startswith(("image_encoder.stem", "image_encoder.blocks", "prefix.")) for n in moved)
    saved = load_checkpoint(latest_checkpoint(run))[1]["agent"]
    resumed = Runner(ppo_config(film, *extra, "task.total_steps=200"), run, resume=True)
    assert resumed.agent.head_opt.state_dict()["state"].keys() == agent.head_opt.state_dict()["state"].keys()
    assert resumed.agent.num_updates == saved["num_updates"] > 0


def test_flow_ppo_keypoint_coef_labels_the_rollouts_frames_with_the_sims_target(film_sft: Path,
                                                                               tmp_path: Path) -> None:
    """``agent.keypoint_coef``: each chunk keeps where the env's target appears in the camera at that moment (the
    projection of ``get_target``, by hand here from the env), the update logs the keypoint loss, and training with
    it pulls the head's keypoints on the collected frames towards those labels. Without ``head_lr`` it is refused."""
    with pytest.raises(InputError, match="head_lr") as err:
        Runner(ppo_config(film_sft, "agent.keypoint_coef=1.0"), tmp_path / "no_head")
    assert "agent.keypoint_coef=0" in str(err.value)
    extra = ["agent.head_lr=3e-3", "agent.expert_lr=1e-6", "agent.keypoint_coef=10.0", "agent.rollout_chunks=32",
             "agent.minibatches=2", "agent.epochs=2", "task.total_steps=240"]
    runner = Runner(ppo_config(film_sft, *extra), tmp_path / "run")
    agent, env = runner.agent, runner.env
    chosen = []  # (labels kept, the env's target projected by hand) at each chunk boundary
    original_choose = agent.choose

    def choose_and_compare(rows, context, feature, critic_obs, inputs, deterministic):
        chunk = original_choose(rows, context, feature, critic_obs, inputs, deterministic)
        by_hand = env.image_position(env.get_target(rows).float(), "front")
        chosen.append((agent.pending_rows["keypoint_label"][rows, 0, 0].clone(), by_hand))
        return chunk

    agent.choose = choose_and_compare
    first: dict[str, torch.Tensor] = {}
    checked = check_first_rollout(agent, first.update)

    def frame_loss(model) -> float:
        """The target keypoint's mean squared image error of ``model``'s head on the first rollout's frames."""
        features = {c: first[f"features/{c}"] for c in agent.sft.cameras}
        with torch.no_grad():
            points = model.encode_with_keypoints({"image_features": features, "tokens": first["instruction"],
                                                  "token_mask": first["instruction_mask"], "state": first["state"]})[1]
        return float(keypoint_loss(points[:, :, 0], first["keypoint_label"][:, :, 0]))

    run = tmp_path / "run"
    runner.learn(evaluate_and_export=False)
    assert checked and chosen and all(torch.allclose(kept, hand) for kept, hand in chosen)
    assert torch.isfinite(first["keypoint_label"]).all() and first["keypoint_label"].abs().max() <= 1.5
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r["loss/keypoint_target"] for r in rows if "loss/keypoint_target" in r]
    assert learned and all(torch.isfinite(torch.tensor(learned)))
    assert frame_loss(agent.model) < 0.7 * frame_loss(agent.sft.model)  # trained head vs the SFT run's
    for missing in ({"target_positions": None}, {"world_cameras": ()}):  # no target; or wrist cameras only
        with pytest.raises(InputError, match="target position and a world-fixed camera") as err:
            agent._check_keypoint_labels(dataclasses.replace(agent.env, **missing))
        assert "agent.keypoint_coef=0" in str(err.value)


def test_flow_ppo_demo_keypoint_coef_labels_the_head_on_the_demonstrations(film_sft: Path, tmp_path: Path) -> None:
    """``agent.demo_keypoint_coef``: the demonstration batch's keypoint loss is SFT's, of the head being trained
    against the frames' own labels (by hand from the same draw); it reaches the head and is logged. Without
    ``demo_coef``, or on demonstrations without labels, it is refused with the fix."""
    with pytest.raises(InputError, match="demo_keypoint_coef") as err:
        Runner(ppo_config(film_sft, "agent.head_lr=1e-3", "agent.demo_keypoint_coef=1.0"), tmp_path / "no_demos")
    assert "agent.demo_coef=1.0" in str(err.value)
    extra = ["agent.head_lr=1e-3", "agent.demo_coef=1.0", "agent.demo_batch=16", "agent.demo_keypoint_coef=5.0",
             "agent.rollout_chunks=32", "agent.minibatches=2", "agent.epochs=1", "task.total_steps=160"]
    run = tmp_path / "run"
    runner = Runner(ppo_config(film_sft, *extra), run)
    agent = runner.agent
    state = agent.generator.get_state()
    parts = agent.demo_losses(keypoints=True)
    agent.generator.set_state(state)
    batch = agent.demos.sample(16, agent.generator, agent.demo_weights)
    noise = torch.randn(batch["action"].shape, generator=agent.generator)
    t = flow.sample_time(16, agent.generator)
    expected = agent.model.losses(batch, batch["action"], noise, t, batch["action_is_pad"], batch["target"])
    assert batch["target"].shape == (16, 1, 1, 2)
    assert parts["keypoint"].shape == (1,) and parts["keypoint"].item() == pytest.approx(expected["keypoint"].item())
    parts["keypoint"].sum().backward()
    assert agent.model.image_encoder.logits.weight.grad.abs().sum() > 0
    agent.model.zero_grad(set_to_none=True)
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r["loss/demo_keypoint_target"] for r in rows if "loss/demo_keypoint_target" in r]
    assert logged and all(0 < x < float("inf") for x in logged)
    unlabelled = tmp_path / "unlabelled_sft"  # the same SFT run, as if trained without agent.target_keypoint
    shutil.copytree(film_sft, unlabelled)
    config = yaml.safe_load((unlabelled / "config.yaml").read_text())
    config["agent"]["target_keypoint"] = 0.0
    (unlabelled / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(InputError, match="no keypoint labels") as err:
        Runner(ppo_config(unlabelled, *extra), tmp_path / "unlabelled")
    assert "agent.demo_keypoint_coef=0" in str(err.value)


def test_flow_ppo_policy_trains_head_false_stops_ppos_gradient_at_the_context(film_sft: Path, tmp_path: Path) -> None:
    """``agent.policy_trains_head=false`` with ``head_lr`` and no other loss: PPO moves the expert and leaves the
    keypoint head and condition MLP exactly as SFT left them (with the default, the same run moves them)."""
    extra = ["agent.head_lr=1e-2", "agent.expert_lr=1e-3", "agent.rollout_chunks=32", "agent.minibatches=2",
             "agent.epochs=1", "task.total_steps=160"]
    moved = {}
    for trains_head in ("true", "false"):
        runner = Runner(ppo_config(film_sft, *extra, f"agent.policy_trains_head={trains_head}"),
                        tmp_path / trains_head)
        before = {k: v.clone() for k, v in runner.agent.model.state_dict().items()}
        runner.learn(evaluate_and_export=False)
        assert runner.agent.num_updates > 0
        moved[trains_head] = {n for n, v in runner.agent.model.state_dict().items() if not torch.equal(before[n], v)}
    head = {"image_encoder.logits.weight", "condition.0.weight"}
    assert head <= moved["true"]
    assert not head & moved["false"] and any(n.startswith("expert.") for n in moved["false"])


def test_flow_ppo_with_a_world_model_value_learns_its_latent_from_each_chunks_successor(sft_run: Path,
                                                                                      tmp_path: Path) -> None:
    """``critic=world_model`` (WCM-style value): each rollout row keeps its successor's critic observation, which is
    the next row of the same env wherever the episode went on; training logs finite consistency and reward losses
    and moves the world model's dynamics head along with its value."""
    run = tmp_path / "run"
    runner = Runner(ppo_config(sft_run, "critic=world_model", "agent.rollout_chunks=32", "agent.minibatches=2",
                               "agent.epochs=1", "task.total_steps=160"), run)
    agent = runner.agent
    before = {k: v.clone() for k, v in agent.critic.state_dict().items()}

    def successors_in_order(batch: dict[str, torch.Tensor]) -> None:
        went_on = 0
        for env in batch["env"].unique():
            idx = torch.nonzero(batch["env"] == env).squeeze(1)
            for i, j in zip(idx[:-1].tolist(), idx[1:].tolist(), strict=True):
                if batch["discount"][i] > 0:
                    assert torch.equal(batch["next_obs"][i], batch["obs"][j])
                    went_on += 1
        assert went_on > 0

    checked = check_first_rollout(agent, successors_in_order)
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "consistency_loss" in r]
    assert checked and learned and all(torch.isfinite(torch.tensor([r["consistency_loss"], r["reward_loss"],
                                                                     r["loss/value"]])).all() for r in learned)
    moved = {n for n, v in agent.critic.state_dict().items() if not torch.equal(before[n], v)}
    assert any(n.startswith("dynamics") for n in moved), sorted(moved)
