"""A trained agent=vla run exports as a VLA artifact (`robot-rl export <run>` and the end of `robot-rl train`) that
the torch-free runtime plays exactly as the run's torch policy does, and that `robot-rl deploy check` accepts.

The run trains on a dataset whose front camera is 48x80 (recorded at 32x32, stretched: tests/vla_tiny.py)
with ``agent.image_size=32``, as a user's camera of another shape would: the artifact takes 32x32 images and says
``vla.resize: nearest``, so the node resamples the camera's 48x80 images as training did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from vla_tiny import TINY_VLA, record_wide

from robot_rl.compose import compose
from robot_rl.deploy.actions import to_targets
from robot_rl.deploy.artifact import ChunkExecution, load_meta
from robot_rl.deploy.vla_runtime import VLARuntime, resize_nearest
from robot_rl.train.run_loading import open_run
from robot_rl.train.runner import Runner

pytestmark = [pytest.mark.render, pytest.mark.slow]  # ~8 min: trains, exports and plays VLA artifacts

TINY = [*TINY_VLA, "agent.updates=5", "export_formats=[onnx]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """Five gradient steps on 3 recorded episodes (front camera stretched to 48x80), exported at the end of training."""
    root = tmp_path_factory.mktemp("vla_export")
    Runner(compose([*TINY, f"agent.dataset={record_wide(root)}", "agent.image_size=32"]), root / "run").learn()
    return root / "run"


def test_train_exports_a_vla_artifact_the_runtime_plays_like_torch(run: Path) -> None:
    meta = load_meta(run / "policy")
    assert meta.inputs == "vla" and meta.task == "so101_reach_lang"
    assert meta.vla.cameras == ["front"] and (meta.vla.height, meta.vla.width) == (32, 32)
    assert meta.chunk_length == 4 and meta.chunk_execution.execute_len == 2
    assert "reach the red target" in meta.vla.instructions

    policy = open_run(run).agent.policy()
    runtime = VLARuntime(run / "policy")
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)
    state = np.asarray(meta.default_joint_pos) + rng.normal(0.0, 0.05, len(meta.default_joint_pos))
    text = "touch the blue sphere"
    ours = runtime.infer({"front": image}, text, state)  # joint targets [H, A]
    chunk = policy.act({"front": torch.from_numpy(image)[None]}, [text], torch.tensor(state, dtype=torch.float32)[None])
    want = to_targets(meta.action, chunk[0].double().numpy())
    np.testing.assert_allclose(ours, want, atol=1e-4)


def test_the_artifact_resamples_camera_sized_images_as_training_did(run: Path) -> None:
    meta = load_meta(run / "policy")
    assert meta.vla.resize == "nearest"
    runtime = VLARuntime(run / "policy")
    camera = np.random.default_rng(1).integers(0, 256, (3, 48, 80), dtype=np.uint8)  # what the 48x80 camera sends
    state = np.asarray(meta.default_joint_pos)
    np.testing.assert_allclose(runtime.infer({"front": camera}, "reach the red target", state),
                               runtime.infer({"front": resize_nearest(camera, 32, 32)}, "reach the red target", state),
                               atol=1e-6)


def test_the_artifact_plays_in_sim_as_the_runs_torch_policy_does(run: Path) -> None:
    """VLAArtifactPlayer (ONNX, one robot per inference, the deploy chunk executor) takes the same first actions as
    the run's VLAPlayer (torch) on the same rendered scene; `robot-rl eval <artifact> --wrong-instruction` runs."""
    import json

    import sim
    from robot_rl.train.artifact_eval import VLAArtifactPlayer
    from robot_rl.train.vla_eval import VLAPlayer

    agent = open_run(run).agent
    env = sim.make_env("so101_reach_lang", num_envs=2, seed=0, cameras=["front"], image_size=32, camera_obs=False)
    obs = env.reset(seed=0)
    ours = VLAArtifactPlayer(VLARuntime(run / "policy"))
    torch_player = VLAPlayer(agent.policy(), agent.policy_chunking()[1])
    for _ in range(3):  # the first chunk's first actions, then a re-query (execute_len 2)
        a, b = ours.act(env, obs), torch_player.act(env, obs)
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-4)
        obs = env.step(a).obs
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "eval", str(run / "policy"), "--episodes", "2",
                           "--num-envs", "2", "--wrong-instruction"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["episodes"] == 2 and summary["wrong_instruction"]["episodes"] == 2


def test_deploy_check_accepts_the_trained_artifact(run: Path) -> None:
    check = subprocess.run([sys.executable, "-m", "robot_rl.cli", "deploy", "check", str(run / "policy"), "--robot",
                            "so101"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_export_command_writes_the_same_artifact_kind(run: Path, tmp_path: Path) -> None:
    """``robot-rl export`` writes the run's VLA artifact; ``--execute-len`` changes only how many of each chunk's
    actions are played before the next inference (policy.yaml ``chunk_execution``)."""
    out = tmp_path / "policy"
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(run), "--out", str(out),
                           "--execute-len", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    meta, trained = load_meta(out), load_meta(run / "policy")
    assert meta.inputs == "vla" and meta.vla == trained.vla and meta.chunk_length == trained.chunk_length
    assert trained.chunk_execution.execute_len > 1
    assert meta.chunk_execution == ChunkExecution("open_loop", 1, trained.chunk_execution.ensemble_decay)


def test_the_run_still_exports_after_its_dataset_moves(run: Path, tmp_path: Path) -> None:
    """The run kept its dataset's description (features, task strings): export needs no frames."""
    kept = run / "dataset_meta" / "meta"
    assert (kept / "info.json").is_file() and (kept / "tasks.parquet").is_file()
    dataset = run.parent / "wide"
    moved = dataset.rename(run.parent / "wide_moved")
    try:
        out = tmp_path / "policy"
        done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(run), "--out", str(out)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "is gone; opening the run with the description it kept" in done.stderr
        assert load_meta(out).vla == load_meta(run / "policy").vla
    finally:
        moved.rename(dataset)


def test_temporal_ensembling_reaches_the_artifact_and_plays_as_in_the_run(run: Path, tmp_path: Path) -> None:
    """``agent.execution=temporal_ensemble``: the run's policy queries every step and averages the chunks predicting
    it (ACT); the exported policy.yaml says so, and the ONNX artifact in sim takes the run's torch actions."""
    import shutil

    import sim
    from robot_rl.train.artifact_eval import VLAArtifactPlayer
    from robot_rl.train.vla_eval import VLAPlayer

    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("policy"))
    config = copy / "config.yaml"
    config.write_text(config.read_text().replace("  execution: open_loop\n", "  execution: temporal_ensemble\n"))
    agent = open_run(copy).agent
    assert agent.policy_chunking()[1].mode == "temporal_ensemble"
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "export", str(copy), "--out", str(copy / "policy")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    execution = load_meta(copy / "policy").chunk_execution
    assert (execution.mode, execution.ensemble_decay) == ("temporal_ensemble", 0.01)
    env = sim.make_env("so101_reach_lang", num_envs=2, seed=0, cameras=["front"], image_size=32, camera_obs=False)
    obs = env.reset(seed=0)
    ours = VLAArtifactPlayer(VLARuntime(copy / "policy"))
    torch_player = VLAPlayer(agent.policy(), agent.policy_chunking()[1])
    for _ in range(3):  # a query every step: from the second step on, each action averages two or more chunks
        a, b = ours.act(env, obs), torch_player.act(env, obs)
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-4)
        obs = env.step(a).obs
