"""Fuzz cases of kind ``cli``: bad flags and values on the command line of every command.

Each case names the flag in ``expect``; the command must refuse it with exit code 2 before doing
any work (and a dataset ``--out`` that exists is never overwritten without ``--overwrite``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fuzz_harness import TRAIN_TINY, FuzzCase, GoodInputs


def _run(case_dir: Path, good: GoodInputs) -> str:
    target = case_dir / "run"
    shutil.copytree(good.run, target)
    return str(target)


def _artifact(case_dir: Path, good: GoodInputs) -> str:
    target = case_dir / "policy"
    shutil.copytree(good.artifact, target)
    return str(target)


def _dataset(case_dir: Path, good: GoodInputs) -> str:
    target = case_dir / "dataset"
    shutil.copytree(good.dataset, target)
    return str(target)


def _case(name: str, make, expect: tuple[str, ...], protect: tuple[str, ...] = ()) -> FuzzCase:
    return FuzzCase(name=f"cli/{name}", kind="cli", make=make, expect=expect, protect=protect)


def cases() -> list[FuzzCase]:
    """The command-line corpus (each argv refers to good files; only the flag is bad)."""
    out = [
        _case("unknown-command", lambda d, g: ["trian"], ("unknown command", "trian")),
        _case("sim-unknown-task", lambda d, g: ["sim", "--task", "so101_rech", "--steps", "2"], ("so101_rech",)),
        _case("sim-zero-envs", lambda d, g: ["sim", "--num-envs", "0", "--steps", "2"], ("--num-envs",)),
        _case("sim-negative-envs", lambda d, g: ["sim", "--num-envs", "-3", "--steps", "2"], ("--num-envs",)),
        _case("sim-negative-steps", lambda d, g: ["sim", "--num-envs", "2", "--steps", "-1"], ("--steps",)),
        _case("sim-negative-threads", lambda d, g: ["sim", "--num-envs", "2", "--steps", "2", "--threads", "-3"],
              ("--threads",)),
        _case("sim-seed-overflow", lambda d, g: ["sim", "--num-envs", "2", "--steps", "2", "--seed", str(2**70)],
              ("--seed",)),
        _case("eval-negative-episodes", lambda d, g: ["eval", _run(d, g), "--episodes", "-5"], ("--episodes",)),
        _case("eval-zero-envs", lambda d, g: ["eval", _run(d, g), "--episodes", "2", "--num-envs", "0"],
              ("--num-envs",)),
        _case("eval-seed-overflow", lambda d, g: ["eval", _run(d, g), "--episodes", "2", "--seed", str(2**70)],
              ("--seed",)),
        _case("eval-missing-path", lambda d, g: ["eval", str(d / "no_such_run"), "--episodes", "2"],
              ("no_such_run",)),
        _case("eval-artifact-unknown-task", lambda d, g: ["eval", _artifact(d, g), "--episodes", "2", "--task",
                                                          "no_such_task"], ("no_such_task",)),
        _case("export-unknown-format", lambda d, g: ["export", _run(d, g), "--format", "png"], ("png",)),
        _case("export-missing-run", lambda d, g: ["export", str(d / "no_such_run")], ("no_such_run",)),
        _case("deploy-check-unknown-robot", lambda d, g: ["deploy", "check", _artifact(d, g), "--robot", "so102"],
              ("so102",)),
        _case("deploy-check-missing-artifact", lambda d, g: ["deploy", "check", str(d / "nothing"), "--robot",
                                                             "so101"], ("nothing",)),
        _case("deploy-sim2sim-domain-id-out-of-range",
              lambda d, g: ["deploy", "sim2sim", "--robot", "so101", "--policy", _artifact(d, g), "--episodes", "1",
                            "--domain-id", "123"], ("--domain-id", "123")),
        _case("deploy-sim2sim-negative-latency",
              lambda d, g: ["deploy", "sim2sim", "--robot", "so101", "--policy", _artifact(d, g), "--episodes", "1",
                            "--latency-ms", "-5"], ("--latency-ms",)),
        _case("deploy-sim2sim-nan-noise",
              lambda d, g: ["deploy", "sim2sim", "--robot", "so101", "--policy", _artifact(d, g), "--episodes", "1",
                            "--noise", "nan"], ("--noise",)),
        _case("ros-params-unknown-robot", lambda d, g: ["ros", "params", "so102"], ("so102",)),
        _case("record-unknown-task", lambda d, g: ["record", "--task", "no_such_task", "--out", str(d / "ds"),
                                                   "--episodes", "1"], ("no_such_task",)),
        _case("record-negative-episodes", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                        "--episodes", "-1"], ("--episodes",)),
        _case("record-zero-envs", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                "--episodes", "1", "--num-envs", "0"], ("--num-envs",)),
        _case("record-odd-camera", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                 "--episodes", "1", "--camera", "63x64"], ("--camera",)),
        _case("record-garbage-camera", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                     "--episodes", "1", "--camera", "big"], ("--camera",)),
        _case("record-bad-override-json", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                        "--episodes", "1", "--override", "episode_s=fast"],
              ("episode_s",)),
        _case("record-negative-episode-s", lambda d, g: ["record", "--task", "so101_reach", "--out", str(d / "ds"),
                                                         "--episodes", "1", "--override", "episode_s=-1"],
              ("episode_s",)),
        _case("record-existing-out-kept", lambda d, g: ["record", "--task", "so101_reach", "--out", _dataset(d, g),
                                                        "--episodes", "1"], ("dataset",), protect=("dataset",)),
        _case("replay-negative-episode", lambda d, g: ["replay", _dataset(d, g), "--episode", "-1"], ("--episode",)),
        _case("replay-missing-episode", lambda d, g: ["replay", _dataset(d, g), "--episode", "99"], ("99",)),
        _case("bc-negative-epochs", lambda d, g: ["bc", _dataset(d, g), "--out", str(d / "bc"), "--epochs", "-1"],
              ("--epochs",)),
        _case("bc-nan-lr", lambda d, g: ["bc", _dataset(d, g), "--out", str(d / "bc"), "--lr", "nan"], ("--lr",)),
        _case("bc-val-fraction-above-one", lambda d, g: ["bc", _dataset(d, g), "--out", str(d / "bc"),
                                                         "--val-fraction", "1.5"], ("--val-fraction",)),
        _case("critic-report-zero-episodes", lambda d, g: ["critic-report", _run(d, g), "--episodes", "0"],
              ("--episodes",)),
        _case("train-unknown-agent", lambda d, g: ["train", *TRAIN_TINY, f"hydra.run.dir={d}/run", "agent=ppp"],
              ("agent", "ppp")),
        _case("train-unknown-task", lambda d, g: ["train", *TRAIN_TINY, f"hydra.run.dir={d}/run",
                                                  "task.name=so101_rech"], ("so101_rech",)),
        _case("train-wrong-type", lambda d, g: ["train", *TRAIN_TINY, f"hydra.run.dir={d}/run",
                                                "task.num_envs=many"], ("task.num_envs", "many")),
        _case("train-resume-not-a-run", lambda d, g: ["train", f"resume={d}"], ("config.yaml",)),
    ]
    return out
