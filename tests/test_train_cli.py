"""`robot-rl train / eval / export` end to end on the default recipe's MuJoCo task, so101_reach_deploy (tiny budget)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.export import PolicyHead
from robot_rl.train.run_loading import open_run

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "task.num_envs=8", "agent.num_steps_per_env=8", "task.total_steps=128", "+task.env.episode_s=0.32",
    "eval_episodes=4", "checkpoint_interval=1", "agent.actor_hidden_dims=[32,32]",
    "critic.hidden_dims=[32,32]",
]


def cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("train")
    out = cli(["train", *TINY], cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list((cwd / "outputs").glob("*/*"))
    assert len(runs) == 1, runs
    artifact = out.stdout.split("policy artifact: ")[1].strip()
    assert Path(artifact).resolve() == (runs[0] / "policy").resolve()
    return runs[0]


def test_train_writes_the_run_layout(run_dir):
    for name in ("config.yaml", "metrics.jsonl", "eval.json", "policy/policy.yaml", "policy/policy.onnx",
                 "policy/policy.pt"):
        assert (run_dir / name).is_file(), name
    assert any((run_dir / "tensorboard").iterdir())
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [64, 128]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_000000000064", "step_000000000128"
    ]
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["episodes"] == 4 and 0.0 <= summary["success_ci95"][0] <= summary["success_ci95"][1] <= 1.0


def test_onnx_artifact_reproduces_the_torch_policy(run_dir):
    runner = open_run(run_dir)
    runtime = PolicyRuntime(run_dir / "policy", robot_joint_names=list(runner.env.robot.joint_names))
    obs = runner.env_factory(16, 7).reset(seed=7)["policy"]
    head = PolicyHead(runner.agent.policy(), runtime.meta).eval()
    with torch.no_grad():
        expected = head(obs).numpy()
    got = np.stack([runtime.infer(o.numpy())[0] for o in obs])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_eval_run_and_artifact_and_export(run_dir, tmp_path):
    out = cli(["eval", str(run_dir), "--episodes", "3"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["episodes"] == 3
    out = cli(["eval", str(run_dir / "policy"), "--episodes", "3"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["task"] == "so101_reach_deploy"  # the default task, the artifact's
    out = cli(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "ts")], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "ts" / "policy.pt").is_file() and not (tmp_path / "ts" / "policy.onnx").exists()
    out = cli(["export", str(run_dir), "--format", "tflite"], tmp_path)
    assert out.returncode == 2 and "tflite" in out.stderr
    out = cli(["export", str(run_dir), "--execute-len", "2", "--out", str(tmp_path / "chunks")], tmp_path)
    assert out.returncode == 2 and "--execute-len 2: this policy predicts chunks of 1 action(s)" in out.stderr
    assert not (tmp_path / "chunks").exists()  # refused before anything is written


def test_resume_continues_the_step_counter(run_dir, tmp_path):
    cfg_path = run_dir / "config.yaml"
    text = cfg_path.read_text()
    cfg_path.write_text(text.replace("total_steps: 128", "total_steps: 192"))
    try:
        out = cli(["train", f"resume={run_dir}"], tmp_path)
    finally:
        cfg_path.write_text(text)
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [64, 128, 192]


def test_bad_override_fails_naming_the_key(tmp_path):
    out = cli(["train", "agent.learning_rat=1e-3"], tmp_path)
    assert out.returncode != 0 and "agent.learning_rat" in out.stderr
    out = cli(["train", "agent=sac", "--help"], tmp_path)
    assert out.returncode == 0 and "resume=<run dir>" in out.stdout and "agent: " in out.stdout
    assert "hydra/launcher: local, parallel, slurm" in out.stdout and "schema/" not in out.stdout
    assert "  utd_ratio: " in out.stdout  # the config composed with the other overrides: SAC's keys


def test_config_groups_lists_each_folder_of_yaml_options(tmp_path):
    from robot_rl.commands.train import config_groups

    for name in ("agent/ppo", "agent/sac", "hydra/launcher/local", "task/b", "task/a"):
        (tmp_path / f"{name}.yaml").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{name}.yaml").write_text("{}")
    (tmp_path / "config.yaml").write_text("{}")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a group")
    assert config_groups(tmp_path).splitlines()[3:] == ["agent: ppo, sac", "hydra/launcher: local", "task: a, b"]


@pytest.mark.render
@pytest.mark.slow
def test_eval_writes_a_video(run_dir, tmp_path):
    out = cli(["eval", str(run_dir), "--episodes", "1", "--video", str(tmp_path / "e.mp4")], tmp_path, 900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "e.mp4").stat().st_size > 1000


def test_multirun_sweeps_seeds_into_numbered_run_dirs(tmp_path):
    tiny = [a for a in TINY if not a.startswith("eval_episodes")]
    out = cli(["train", "-m", "seed=3,4", *tiny, "eval_episodes=0", "export_formats=[]", "logger=none"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    configs = sorted((tmp_path / "outputs").glob("*/*/*/config.yaml"))
    assert [p.parent.name for p in configs] == ["0", "1"]
    assert ["seed: 3" in p.read_text() and "seed: 4" not in p.read_text() for p in configs] == [True, False]
    assert "seed: 4" in configs[1].read_text()


@pytest.mark.parametrize(("signame", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_sigterm_stops_cleanly_and_says_how_to_resume(tmp_path, signame, code):
    """SIGINT (Ctrl-C) or SIGTERM (kill, a scheduler's preemption) during training: exit 130 / 143, no traceback,
    the run's checkpoints kept and the resume command printed; a resumed run starts from a kept checkpoint."""
    import signal
    import time

    from robot_rl.checkpoint import latest_checkpoint

    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [a for a in TINY if not a.startswith("task.total_steps")]
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", *args, "task.total_steps=10000000",
                             "logger=none", f"hydra.run.dir={run}"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as from a terminal: a test runner started in the background by a non-interactive
                            # shell (CI, nohup ... &) ignores SIGINT, and its children would inherit that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while latest_checkpoint(run) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert latest_checkpoint(run) is not None, proc.stderr.read() if proc.poll() is not None else "no checkpoint"
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and f"continue with robot-rl train resume={run}" in err
    from robot_rl.config.io import load_train_config
    from robot_rl.train.runner import Runner

    resumed = Runner(load_train_config(run / "config.yaml"), run, resume=True)  # the newest intact checkpoint
    assert resumed.env_steps > 0
