"""Chunks end to end: a chunked_td3 run exports its whole chunk with the execution it collected with, and
the artifact is evaluated in sim the same way (one inference per ``execute_len`` steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from robot_rl.compose import compose
from robot_rl.deploy.artifact import ChunkExecution, load_meta, write_manifest
from robot_rl.deploy.runtime import PolicyRuntime, chunk_executor
from robot_rl.export import PolicyHead, export_policy, make_meta
from robot_rl.train.artifact_eval import ArtifactPolicy
from robot_rl.train.evaluation import evaluate, playable
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")

H, EXECUTE = 3, 2


@pytest.fixture(scope="module")
def chunked_run(tmp_path_factory):
    """A tiny chunked_td3 run on so101_reach (h = 3, open loop of 2 actions): past warm-up, a few updates."""
    torch.manual_seed(0)
    cfg = compose(["task=so101_reach", "agent=chunked_td3", f"critic.chunk_len={H}", "critic.hidden_dims=[16]",
                   "agent.actor_hidden_dims=[16]", "agent.learning_starts=32", "agent.batch_size=16",
                   "agent.buffer_size=1000", f"agent.execute_len={EXECUTE}", "agent.normalize_obs=true",
                   "task.num_envs=4", "task.total_steps=96", "eval_episodes=1", "logger=none"])
    runner = Runner(cfg, tmp_path_factory.mktemp("chunked") / "run")
    result = runner.learn()
    return runner, result


def test_export_writes_the_chunk_and_the_execution(chunked_run):
    runner, result = chunked_run
    agent = runner.agent
    assert agent.updates > 0
    meta = load_meta(result.artifact)
    assert meta.chunk_length == H
    assert meta.chunk_execution == ChunkExecution("open_loop", EXECUTE, 0.01)
    raw = yaml.safe_load((result.artifact / "policy.yaml").read_text())
    assert raw["chunk_execution"] == {"mode": "open_loop", "execute_len": EXECUTE, "ensemble_decay": 0.01}
    runtime = PolicyRuntime(result.artifact)
    obs = torch.randn(runtime.meta.observation_dim, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # the torch actor's chunk, in robot units: offset + scale * clip(env action)
        chunk = agent.to_env_action(agent.actor(agent.normalizers["policy"](obs[None])))[0]  # [H, A]
    offset, scale = np.asarray(meta.action.offset), np.asarray(meta.action.scale)
    expected = offset + scale * np.clip(chunk.numpy(), meta.action.clip_low, meta.action.clip_high)
    got = runtime.infer(obs.numpy())
    assert got.shape == (H, meta.action_dim)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_artifact_evaluation_plays_chunks_open_loop(chunked_run):
    import sim

    _, result = chunked_run
    env = sim.make_env("so101_reach", num_envs=1, seed=0)
    policy = ArtifactPolicy(PolicyRuntime(result.artifact))
    lengths = evaluate(policy, env, episodes=1, seed=0, on_done=policy.reset).lengths
    assert lengths[0] > 2 * EXECUTE  # long enough for re-planning every step to differ
    assert policy.queries == math.ceil(lengths[0] / EXECUTE)  # one inference per execute_len steps


def test_artifact_evaluation_can_replan_every_step(chunked_run):
    """``robot-rl eval --execute-len 1``: one inference per step (the chunk's first action); outside [1, H] refused."""
    import sim
    from robot_rl.errors import InputError
    from robot_rl.train.artifact_eval import evaluate_artifact

    _, result = chunked_run
    env = sim.make_env("so101_reach", num_envs=1, seed=0)
    policy = ArtifactPolicy(PolicyRuntime(result.artifact), execute_len=1)
    lengths = evaluate(policy, env, episodes=1, seed=0).lengths
    assert policy.queries == lengths[0]
    summary = evaluate_artifact(result.artifact, episodes=1, num_envs=1, seed=0, execute_len=H)
    assert summary["execute_len"] == H and summary["episodes"] == 1
    with pytest.raises(InputError, match=r"--execute-len = 4: must be in \[1, 3\]"):
        evaluate_artifact(result.artifact, episodes=1, num_envs=1, seed=0, execute_len=H + 1)


def test_robot_rl_export_reopens_the_run_with_one_env(chunked_run, tmp_path, capsys):
    """``robot-rl export <run>`` opens the run with 1 env (trained with 4): the per-env replay buffer and AC3's
    episode labels, laid out for 4 envs, are dropped rather than refused; the artifact is the run's."""
    from robot_rl.commands.export import main as export_main

    runner, result = chunked_run
    assert export_main([str(runner.run_dir), "--format", "onnx", "--out", str(tmp_path / "again")]) == 0
    obs = np.random.default_rng(0).normal(size=load_meta(result.artifact).observation_dim).astype(np.float32)
    np.testing.assert_allclose(PolicyRuntime(tmp_path / "again").infer(obs), PolicyRuntime(result.artifact).infer(obs),
                               atol=1e-6)


def test_an_artifact_without_chunk_execution_plays_its_whole_chunk_open_loop(tmp_path):
    """Artifacts from before ``chunk_execution`` still load: open loop of all ``H`` actions."""
    meta = make_meta(robot="toy", joint_names=["a", "b"], default_joint_pos=[0.0, 0.0],
                     observation_layout=[("joint_pos", 2, 1.0)], action_scale=0.5, control_hz=50, chunk_length=4)
    export_policy(PolicyHead(torch.nn.Linear(2, 8), meta), meta, tmp_path, formats=("onnx",))
    data = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    del data["chunk_execution"]
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    write_manifest(tmp_path, ["policy.yaml", "policy.onnx"])
    runtime = PolicyRuntime(tmp_path)
    assert runtime.meta.chunk_execution == ChunkExecution("open_loop", 4, 0.0)
    ex = chunk_executor(runtime.meta)
    queried = []
    for _ in range(5):
        queried.append(bool(ex.needs_query()[0]))
        ex.step(np.zeros((int(queried[-1]), 4, 2)))
    assert queried == [True, False, False, False, True]


def test_the_run_and_its_artifact_play_the_same_actions(chunked_run):
    """``robot-rl eval <run>`` (torch ChunkPlayer) and ``robot-rl eval <artifact>`` (ONNX + numpy executor)."""
    runner, result = chunked_run
    run_policy = playable(runner.agent)
    artifact_policy = ArtifactPolicy(PolicyRuntime(result.artifact))
    D = artifact_policy.runtime.meta.observation_dim
    obs = torch.randn(9, 3, D, generator=torch.Generator().manual_seed(4))
    for t in range(9):
        torch.testing.assert_close(artifact_policy(obs[t]), run_policy(obs[t]), atol=1e-5, rtol=0)
        if t == 4:  # env 0 finishes mid-chunk: both drop its plan
            done = torch.tensor([True, False, False])
            run_policy.reset(done)
            artifact_policy.reset(done)
    # envs 1, 2 query at steps 0, 2, 4, 6, 8; env 0 at 0, 2, 4, then 5 (its plan dropped) and 7
    assert run_policy.queries == artifact_policy.queries == 15
