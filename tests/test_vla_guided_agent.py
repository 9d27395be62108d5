"""agent=vla_guided (critic-guided flow on the VLA's action expert): the expert step follows a critic by hand and
trains the expert alone, training and resume through the command, export and the critic report, bad input. One tiny
so101_reach_lang dataset (6 scripted episodes of 1 s, front camera at 32x32) and a 10-step SFT run with the MLP
expert are made per module; the VLA is real, the env is real MuJoCo with rendered cameras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robot_rl.checkpoint import latest_checkpoint, load_checkpoint
from robot_rl.compose import compose
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.errors import InputError
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.render

TASK = ["task=so101_reach_lang", "task.env.cameras=[front]", "task.env.image_size=32", "task.env.camera_obs=false",
        "+task.env.episode_s=1.0", "task.num_envs=4", "sim.num_threads=1", "logger=none", "eval_episodes=0",
        "export_formats=[]"]
SFT = ["agent=vla", *TASK, "agent.cameras=[front]", "agent.chunk_len=4", "agent.execute_len=2", "agent.batch_size=16",
       "agent.warmup_updates=0", "agent.log_interval=10", "agent.updates=10"]
MLP_EXPERT = ["agent.action_expert=mlp", "agent.global_condition=true"]
GUIDED = ["agent=vla_guided", *TASK, "agent.learning_starts=8", "agent.expert_starts=16", "agent.batch_size=16",
          "agent.iteration_steps=40", "checkpoint_interval=1"]


@pytest.fixture(scope="module")
def sft_runs(tmp_path_factory) -> dict[str, Path]:
    """``{"mlp": run, "transformer": run}``: two 10-step SFT runs on one recorded dataset."""
    root = tmp_path_factory.mktemp("vla_guided") / "reach_lang"
    record("so101_reach_lang", expert_policy, root, 6, None, num_envs=3, seed=0,
           overrides={"episode_s": 1.0, "cameras": ["front"], "image_size": 32})
    runs = {}
    for name, extra in (("mlp", MLP_EXPERT), ("transformer", [])):
        runs[name] = root.parent / name
        Runner(compose([*SFT, *extra, f"agent.dataset={root}"]), runs[name]).learn(evaluate_and_export=False)
    return runs


def guided_config(sft_run: Path, *extra: str):
    return compose([*GUIDED, f"agent.policy={sft_run}", *extra])


class HandCritic(torch.nn.Module):
    """``Q(obs, x) = -|x - 0.5|^2`` over the executed chunk ``x`` (every member alike)."""

    def forward(self, obs, action, reduce="min", target=False):
        return -(action - 0.5).pow(2).sum(1, keepdim=True)


def test_the_replayed_feature_gives_the_expert_its_own_context(sft_runs, tmp_path: Path) -> None:
    """The critic observation ``[f, elapsed]`` a replay row keeps rebuilds what the MLP expert reads: its velocity
    from the rebuilt context equals its velocity from the VLA's own encoding of the same inputs."""
    from robot_rl.models.vla.steering import context_feature

    agent = Runner(guided_config(sft_runs["mlp"]), tmp_path / "r").agent
    images = {c: torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8) for c in agent.sft.cameras}
    tokens, mask = agent.sft.encode_text(["reach the red target", "go to the blue one"])
    with torch.no_grad():
        context = agent.model.encode({"images": images, "tokens": tokens, "token_mask": mask,
                                      "state": torch.randn(2, 6)})
        critic_obs = torch.cat([context_feature(context), torch.full((2, 1), 0.3)], dim=1)
        x, t = torch.randn(2, *agent.chunk_shape), torch.tensor([0.9, 0.2])
        torch.testing.assert_close(agent.model.velocity(x, t, agent.condition_context(critic_obs)),
                                   agent.model.velocity(x, t, context))


def test_the_expert_step_follows_the_critic_and_trains_the_expert_alone(sft_runs, tmp_path: Path) -> None:
    """With a critic by hand, expert steps move the executed part of the sampled chunks toward the critic's maximum
    (0.5 in standardised units) and leave the unexecuted tail and the frozen prefix where SFT had them."""
    agent = Runner(guided_config(sft_runs["mlp"], "agent.expert_lr=3e-3", "agent.eta=0.5"), tmp_path / "r").agent
    agent.critic = HandCritic()
    before = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    obs = torch.randn(64, agent.feature_dim + 1)
    torch.manual_seed(0)

    def distance() -> float:
        return (agent.executed(agent.sample_chunks(obs)) - 0.5).pow(2).sum(1).mean().item()

    start = distance()
    gains = [agent._expert_step(obs)["guided_gain"].item() for _ in range(60)]
    assert all(g > 0 for g in gains)  # the shift always climbs the critic
    assert distance() < 0.7 * start
    trained = {id(p) for p in agent.model.expert_parameters()}
    for name, p in agent.model.named_parameters():
        assert torch.equal(p, before[name]) != (id(p) in trained), name  # the expert moved, nothing else did
    assert agent.expert_updates == 60


@pytest.mark.slow
def test_training_through_the_command_learns_resumes_and_exports(sft_runs, tmp_path: Path) -> None:
    """240 env steps with 4 envs: critic steps after 8 chunks, expert steps after 16, finite losses logged; a resumed
    run keeps the replay, the expert and the counters; the run exports the SFT artifact kind; the critic report
    runs on it."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", *GUIDED, f"agent.policy={sft_runs['mlp']}",
           f"hydra.run.dir={run}"]
    done = subprocess.run([*cmd, "task.total_steps=240"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    learned = [r for r in rows if "loss/flow" in r]
    assert learned and all(torch.isfinite(torch.tensor([r["loss/critic"], r["loss/flow"], r["loss/trust"]])).all()
                           for r in learned)
    state = load_checkpoint(latest_checkpoint(run))[1]["agent"]
    assert state["expert_updates"] > 0 and state["buffer"]["size"] == state["chunks_collected"] >= 100
    resumed = Runner(guided_config(sft_runs["mlp"], "task.total_steps=320"), run, resume=True)
    assert resumed.agent.num_updates == state["num_updates"] and len(resumed.agent.buffer) == state["buffer"]["size"]
    assert all(torch.equal(v, state["model"][k]) for k, v in resumed.agent.model.state_dict().items())
    resumed.learn(evaluate_and_export=False)
    assert resumed.env_steps >= 320 and resumed.agent.expert_updates > state["expert_updates"]

    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(run), "--format", "onnx"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    from robot_rl.deploy.artifact import load_meta

    assert load_meta(run / "policy").inputs == "vla"
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "critic-report", str(run), "--episodes", "2",
                           "--latest-only"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "values at chunk starts only" in (run / "critic_report" / "report.md").read_text()


def test_bad_input_is_a_clear_error(sft_runs, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"agent=vla_guided needs the SFT run"):
        Runner(compose(GUIDED), tmp_path / "a")
    with pytest.raises(InputError, match="MLP expert") as caught:
        Runner(guided_config(sft_runs["transformer"]), tmp_path / "b")
    assert "agent.action_expert=mlp" in str(caught.value)
    with pytest.raises(ValueError, match=r"agent.expert_starts = 4 is below agent.learning_starts = 8"):
        guided_config(sft_runs["mlp"], "agent.expert_starts=4")
    with pytest.raises(ValueError, match="eta"):
        guided_config(sft_runs["mlp"], "agent.eta=-1")
    with pytest.raises(ValueError, match="critic"):
        guided_config(sft_runs["mlp"], "critic=quantile")


def test_the_demonstrations_stay_in_the_loop(sft_runs, tmp_path: Path) -> None:
    """``agent.demo_coef``: expert steps add the SFT demonstrations' flow-matching loss, logged as ``loss/demo``."""
    run = tmp_path / "run"
    runner = Runner(guided_config(sft_runs["mlp"], "agent.demo_coef=1.0", "agent.demo_batch=8",
                                  "task.total_steps=160"), run)
    assert runner.agent.demos is not None
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    demo = [r["loss/demo"] for r in rows if "loss/demo" in r]
    assert demo and all(torch.isfinite(torch.tensor(demo)))
