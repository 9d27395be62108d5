"""Checkpoints: tree flattening, atomic writes, and a real kill -9 followed by resume."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.checkpoint import (
    CheckpointError,
    flatten,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    unflatten,
)
from robot_rl.compose import compose
from robot_rl.train.runner import Runner

TESTS = Path(__file__).parent
OVERRIDES = [
    "task.name=toy_reach", "task.num_envs=16", "checkpoint_interval=2", "logger=none",
    "logger.progress=false", "agent.num_steps_per_env=8", "eval_episodes=0", "export_formats=[]",
    "agent.actor_hidden_dims=[32,32]", "critic.hidden_dims=[32,32]",
]


def toy_factory(num_envs: int, seed: int) -> ToyReach:
    return ToyReach(num_envs, seed=seed)


def test_flatten_round_trips_optimizer_state():
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), betas=(0.8, 0.9))
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"opt": opt.state_dict(), "lr": 1e-3, "n": 7, "name": "x", "none": None}
    skeleton, tensors = flatten(state)
    back = unflatten(skeleton, tensors)
    assert back["opt"]["param_groups"][0]["betas"] == [0.8, 0.9] and back["n"] == 7
    opt2 = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    opt2.load_state_dict(back["opt"])
    torch.testing.assert_close(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    with pytest.raises(TypeError, match=r"set at a/b"):
        flatten({"a": {"b": {1, 2}}})


def test_save_is_atomic_and_prunes(tmp_path):
    for step in (10, 20, 30, 40):
        save_checkpoint(tmp_path, step, {"w": torch.full((2,), float(step))}, keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == [f"step_{s:012d}" for s in (20, 30, 40)]
    step, state = load_checkpoint(latest_checkpoint(tmp_path))
    assert step == 40 and torch.equal(state["w"], torch.full((2,), 40.0))
    # What a kill -9 mid-write leaves behind: a temp dir; the next save removes it.
    (tmp_path / "checkpoints" / ".tmp_abc").mkdir()
    save_checkpoint(tmp_path, 50, {"w": torch.zeros(2)}, keep=3)
    assert not (tmp_path / "checkpoints" / ".tmp_abc").exists()
    (tmp_path / "checkpoints" / "step_000000000060").mkdir()
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(tmp_path / "checkpoints" / "step_000000000060")


def test_kill_9_then_resume_continues_counters_and_optimizer(tmp_path):
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]
        from test_checkpoint import OVERRIDES, toy_factory
        from robot_rl.compose import compose
        from robot_rl.train.runner import Runner
        cfg = compose(OVERRIDES + ["task.total_steps=100000000"])
        Runner(cfg, {str(run)!r}, env_factory=toy_factory).learn()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while len(list_checkpoints(run)) < 2:
            assert proc.poll() is None, "training process died before checkpointing"
            assert time.monotonic() < deadline, "no checkpoints within 120 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    step, state = load_checkpoint(latest_checkpoint(run))
    updates = state["runner"]["updates"]
    assert step == updates * 16 * 8 and updates >= 4

    cfg = compose([*OVERRIDES, f"task.total_steps={step + 3 * 128}"])
    runner = Runner(cfg, run, env_factory=toy_factory, resume=True)
    assert runner.env_steps == step and runner.updates == updates
    saved = state["agent"]["optimizer"]["state"][0]["exp_avg"]
    torch.testing.assert_close(runner.agent.optimizer.state_dict()["state"][0]["exp_avg"], saved)
    assert runner.agent.learning_rate == state["agent"]["learning_rate"]
    result = runner.learn(evaluate_and_export=False)
    assert result.env_steps == step + 3 * 128 and result.updates == updates + 3
    assert latest_checkpoint(run).name == f"step_{step + 3 * 128:012d}"
