"""VLA supervised fine-tuning from scripted demonstrations: success in sim against the issue's targets.

Per task (``--tasks``): take the dataset at ``--data-root/<task minus so101_>_<episodes>`` (e.g.
``reach_lang_100``), or record it there with the scripted expert when it is missing (``robot-rl record``, the task's
:data:`CAMERAS` at 64x64, recording seed 0); train ``agent=vla`` through the normal command (``robot-rl train``, one
torch thread, ``nice -n 5``, stopped by ``max_train_s=--minutes*60``); evaluate the run with ``robot-rl eval
--wrong-instruction`` on ``--episodes`` episodes from seed ``--eval-seed`` (not the recording's): success overall
and per target colour told the right instruction, and told another target's (same paraphrase). Tasks run one after
the other. ``--record-noise 0.02`` records (and trains on) DART demonstrations instead: the expert's actions executed
with that much Gaussian noise, its clean actions stored (:func:`dataset_for`). Rows go to ``--out``
(``docs/results/vla/<task>.json``: command, commit, load, machine) and the table of every task's newest rows to
``docs/results/vla_sft.md``.

    python benchmarks/vla_sft.py --tasks so101_reach_lang so101_pick_lang --minutes 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _results import RESULTS, run_facts, write_rows

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"so101_reach_lang": 0.70, "so101_pick_lang": 0.50}
"""The issue's success targets."""
CAMERAS = {"so101_reach_lang": ["front", "top"], "so101_pick_lang": ["front", "wrist"]}
"""The cameras recorded and seen per task: reach_lang's targets span the arm's whole workspace (its ``front`` and
``top`` see all of them), pick_lang's cubes lie close in front of the robot (its near ``front`` and the wrist)."""
CHANCE = {"so101_reach_lang": 1 / 4, "so101_pick_lang": 1 / 3}
"""One over the number of coloured targets: success of a policy that ignores the instruction but does the task."""


def robot_rl(args: list[str], env: dict[str, str], log: Path | None = None) -> str:
    """Run ``nice -n 5 robot-rl <args>``; stdout (also appended to ``log``); raises on a non-zero exit."""
    cmd = ["nice", "-n", "5", sys.executable, "-m", "robot_rl.cli", *args]
    print("+", " ".join(cmd[3:]), flush=True)
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}\n")
    if done.returncode != 0:
        raise RuntimeError(f"robot-rl {args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dataset_name(task: str, episodes: int, record_noise: float) -> str:
    """``reach_lang_100``; ``reach_lang_100_noise0.02`` for a DART recording (:func:`dataset_for`)."""
    return f"{task.removeprefix('so101_')}_{episodes}" + (f"_noise{record_noise:g}" if record_noise else "")


def dataset_for(task: str, root: Path, episodes: int, env: dict[str, str], record_noise: float = 0.0) -> Path:
    """The task's dataset under ``root`` (:func:`dataset_name`), recorded with the scripted expert and the task's
    :data:`CAMERAS` when missing. ``record_noise > 0``: DART (Laskey et al., 2017) -- the envs execute the expert's
    action plus Gaussian noise of that standard deviation (``randomization.action_noise_std``, in the policy's
    [-1, 1] action units) while the dataset keeps the expert's clean action, so the demonstrations show how to
    correct the small errors a learned policy makes."""
    path = root / dataset_name(task, episodes, record_noise)
    if not (path / "meta" / "info.json").is_file():
        cameras = ",".join(f'"{c}"' for c in CAMERAS[task])
        noise = ["--override", f'randomization={{"action_noise_std": {record_noise}}}'] if record_noise else []
        robot_rl(["record", "--task", task, "--episodes", str(episodes), "--num-envs", "8", "--seed", "0",
                  "--override", f"cameras=[{cameras}]", "--override", "image_size=64", *noise, "--out", str(path)],
                 env)
    return path


def run_task(task: str, args: argparse.Namespace, env: dict[str, str]) -> dict:
    """Train and evaluate one task; its row."""
    data = dataset_for(task, args.data_root, args.demos, env, args.record_noise)
    name = f"{task}-{args.tag}" if args.tag else task
    run = args.runs / name
    log = args.runs / f"{name}.log"
    overrides = [f"agent.{kv}" for kv in args.agent]
    cameras = ",".join(CAMERAS[task])
    if args.eval_only:
        train_wall = trained_seconds(log)
    else:
        start = time.monotonic()
        robot_rl(["train", "agent=vla", f"agent.dataset={data}", f"task={task}", f"task.env.cameras=[{cameras}]",
                  f"agent.cameras=[{cameras}]",
                  "task.env.camera_obs=false", f"agent.updates={args.updates}", f"max_train_s={60 * args.minutes}",
                  "eval_episodes=0", "export_formats=[]", "sim.num_threads=1", "logger.progress=false",
                  f"seed={args.seed}", f"hydra.run.dir={run}", *overrides], env, log)
        train_wall = time.monotonic() - start
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out = robot_rl(["eval", str(run), "--episodes", str(args.episodes), "--num-envs", str(args.eval_envs),
                    "--seed", str(args.eval_seed), "--wrong-instruction"], env, log)
    summary = json.loads(out[out.index("{"):])
    wrong = summary.pop("wrong_instruction")
    return {"task": task, "dataset": str(data), "demos": args.demos, "record_noise": args.record_noise,
            "run": str(run), "agent": args.agent,
            "cameras": CAMERAS[task],
            "train_wall_s": round(train_wall, 1), "gradient_steps": summary["env_steps"],
            "final_flow_loss": metrics[-1].get("loss/flow") if metrics else None,
            "target": TARGETS.get(task), "chance": CHANCE.get(task), "eval_seed": args.eval_seed,
            "named": summary, "wrong_instruction": wrong}


def trained_seconds(log: Path) -> float:
    """``--eval-only``: the training wall the run's log states (``trained N gradient steps in S s``, the train
    command's last line; the measured wall adds the process start, ~10 s)."""
    lines = [line for line in log.read_text().splitlines() if line.startswith("trained ")] if log.is_file() else []
    if not lines:
        sys.exit(f"{log}: no 'trained ... in S s' line: the run did not finish training; run without --eval-only")
    return float(lines[-1].rsplit(" in ", 1)[1].split()[0])


def noise_std(text: str) -> float:
    """``--record-noise``: a finite standard deviation >= 0."""
    value = float(text)
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a standard deviation >= 0, e.g. 0.02")
    return value


def pct(rate: float, ci: list[float]) -> str:
    return f"{100 * rate:.0f}% [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]"


def table(rows: list[dict], metas: list[dict]) -> str:
    """The docs/results/vla_sft.md page of ``rows`` (one per rows file) and their files' ``metas``."""
    lines = ["# VLA fine-tuning from scripted demonstrations", "",
             "Written by `benchmarks/vla_sft.py` (raw rows in `docs/results/vla/<task>.json`). `agent=vla` "
             "(`VLAConfig.cpu`, 64x64 images of the cameras in the table, joint-position state) trained offline by "
             "`robot-rl train` on the dataset's scripted-expert episodes (recording seed 0), one torch thread; "
             "evaluated by `robot-rl eval --wrong-instruction` on episodes from another seed. Success with a 95% "
             "Wilson interval; *wrong instruction*: the same episodes with the policy told another target's "
             "instruction (same paraphrase) while the env scores the named target.", "",
             "| task | cameras | agent overrides | demos | train wall | gradient steps | success (target) | "
             "per target | wrong instruction (chance) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        named, wrong = r["named"], r["wrong_instruction"]
        per = ", ".join(f"{k} {100 * v['success_rate']:.0f}%" for k, v in named.get("success_by_target", {}).items())
        target = f" (>= {100 * r['target']:.0f}%)" if r.get("target") else ""
        chance = f" ({100 * r['chance']:.0f}%)" if r.get("chance") else ""
        overrides = " ".join(r["agent"]) or "-" if "agent" in r else "(see command)"
        cameras = " + ".join(r.get("cameras", ["front", "wrist"]))
        demos = f"{r['demos']}" + (f" (DART {r['record_noise']:g})" if r.get("record_noise") else "")
        lines.append(f"| {r['task']} | {cameras} | {overrides} | {demos} | {r['train_wall_s'] / 60:.1f} min | "
                     f"{r['gradient_steps']} | "
                     f"{pct(named['success_rate'], named['success_ci95'])}{target} over {named['episodes']} | {per} | "
                     f"{pct(wrong['success_rate'], wrong['success_ci95'])}{chance} |")
    lines.append("")
    for meta in metas:
        lines.append(f"- Command: `{meta['command']}`; commit {meta.get('commit', '?')}; load average "
                     f"{meta['load_average']['start']} -> {meta['load_average']['end']}; {meta['date']}.")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", nargs="*", default=list(TARGETS), help="tasks to run (none: only rewrite the table)")
    p.add_argument("--data-root", type=Path, default=Path("outputs/vla_data"),
                   help="where each task's dataset is (or is recorded): <root>/<task minus so101_>_<demos>")
    p.add_argument("--demos", type=int, default=100, help="episodes in (or to record into) the dataset")
    p.add_argument("--record-noise", type=noise_std, default=0.0,
                   help="record DART demonstrations: the expert's actions executed with this much Gaussian noise "
                        "([-1, 1] units; 0.02 on reach_lang), its clean actions stored (dataset <...>_noise<x>)")
    p.add_argument("--minutes", type=float, default=30.0, help="training wall budget per task")
    p.add_argument("--updates", type=int, default=4000, help="gradient steps planned (the cosine schedule's length)")
    p.add_argument("--agent", nargs="*", default=[], help="extra agent.KEY=VALUE overrides, e.g. lr=1e-3")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    p.add_argument("--eval-envs", type=int, default=50)
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help="training seed")
    p.add_argument("--eval-only", action="store_true",
                   help="evaluate the finished run <runs>/<task>-<tag> again (e.g. after its evaluation failed) and "
                        "write its rows; the training wall comes from its log")
    p.add_argument("--tag", default="", help="suffix of the run and rows file names (<task>-<tag>), to keep variants")
    p.add_argument("--runs", type=Path, default=Path("outputs/bench_vla_sft"))
    p.add_argument("--out", type=Path, default=RESULTS / "vla")
    args = p.parse_args()
    args.runs = args.runs.resolve()
    args.runs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "EGL_PLATFORM": os.environ.get("EGL_PLATFORM", "surfaceless")}
    for task in args.tasks:
        row = run_task(task, args, env)
        write_rows(args.out / f"{task}-{args.tag}.json" if args.tag else args.out / f"{task}.json", [row])
        n, w = row["named"], row["wrong_instruction"]
        target = row["target"]
        print(f"{task}: success {pct(n['success_rate'], n['success_ci95'])}"
              + (f" (target >= {100 * target:.0f}%: {'met' if n['success_rate'] >= target else 'MISSED'})"
                 if target else "")
              + f"; wrong instruction {pct(w['success_rate'], w['success_ci95'])}; trained "
              f"{row['train_wall_s'] / 60:.1f} min, {row['gradient_steps']} steps", flush=True)
    files = sorted(args.out.glob("so101_*.json"))  # deploy_latency.json (vla_latency.py) lives here too
    rows = [row for f in files for row in json.loads(f.read_text())["rows"]]
    metas = [json.loads(f.read_text())["meta"] for f in files] or [run_facts(sys.argv)]
    (args.out.parent / "vla_sft.md").write_text(table(rows, metas))
    print(f"table written to {args.out.parent / 'vla_sft.md'}")


if __name__ == "__main__":
    main()
