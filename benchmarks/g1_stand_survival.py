"""g1_stand survival of a trained policy artifact, with and without pushes, plus the run's training curve.

    python benchmarks/g1_stand_survival.py <run dir> [--episodes 100] [--out docs/results/g1_stand/survival.json]
        [--max-step-change 0.15]

Evaluates ``<run>/policy`` (the exported artifact, through onnxruntime as ``robot-rl eval`` does) on
``g1_stand`` (``g1_stand_gait`` for a run of a gait-clock task, whose policy observes the clock) over
``--episodes`` deterministic 10 s episodes under each push condition: the task's own
pushes (every 5-8 s, up to 0.5 m/s per axis), none, a gentler 0.25 m/s and a harder 1.0 m/s, with the run's own
``task.env.control`` (``--max-step-change``: under the deploy safety layer's rate limit instead). Survival is
the share of episodes ending by the time limit rather than a fall or tip, with its Wilson 95% interval. The curve
rows are the run's ``metrics.jsonl`` training window (last 200 episodes, stochastic policy, task pushes): env steps,
survival, mean episode length and return; an SVG of survival and length against env steps goes beside the
JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _results import RESULTS, write_rows

CONDITIONS = {"task pushes (5-8 s, 0.5 m/s)": None, "no pushes": 0.0, "pushes 0.25 m/s (5-8 s)": 0.25,
              "pushes 1.0 m/s (5-8 s)": 1.0}
"""Push condition -> ``push_velocity`` override (None: the task's own; 0: pushes off)."""


def task_configs() -> dict[str, Any]:
    """The G1 locomotion tasks these benchmarks evaluate: name -> default :class:`sim.task_cfg.TaskCfg`."""
    from sim.tasks.g1_locomotion import g1_stand_cfg, g1_walk_cfg, with_gait

    return {"g1_stand": g1_stand_cfg(), "g1_walk": g1_walk_cfg(), "g1_stand_gait": with_gait(g1_stand_cfg()),
            "g1_walk_gait": with_gait(g1_walk_cfg())}


def evaluation_task(trained: str, kind: str) -> str:
    """``g1_<kind>`` (``stand`` or ``walk``) with a gait clock where the ``trained`` task had one: the policy's
    observation must be the one it was trained on."""
    return f"g1_{kind}_gait" if trained.endswith("_gait") else f"g1_{kind}"


def survival_condition(artifact: Path, episodes: int, seed: int, push_velocity: float | None,
                       task: str = "g1_stand", control: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evaluation summary (:meth:`robot_rl.train.evaluation.EvalResult.summary`) of the artifact on ``task``
    (g1_stand or g1_stand_gait) with ``push_velocity`` (None: the task's pushes; 0: none), one env per episode;
    ``control``: the task's control overrides (:func:`evaluation_control`)."""
    import sim
    from robot_rl.deploy.runtime import PolicyRuntime
    from robot_rl.deploy.validate import RobotSpec
    from robot_rl.train.artifact_eval import ArtifactPolicy
    from robot_rl.train.evaluation import evaluate

    overrides = {}
    if push_velocity is not None:
        rand = task_configs()[task].randomization
        rand = dataclasses.replace(rand, push_velocity=push_velocity,
                                   push_interval_s=rand.push_interval_s if push_velocity else None)
        overrides["randomization"] = rand
    if control:
        overrides["control"] = control
    env = sim.make_env(task, num_envs=episodes, seed=seed, **overrides)
    policy = ArtifactPolicy(PolicyRuntime(artifact, robot=RobotSpec.from_robot(env.robot.as_dict())))
    start = time.perf_counter()
    summary = evaluate(policy, env, episodes, seed, on_done=policy.reset).summary()
    summary["wall_s"] = round(time.perf_counter() - start, 1)
    env.close()
    return summary


def curve_rows(metrics: Path) -> list[dict[str, float]]:
    """``[{step, survival, length_s, return}]`` of every logged update with finished episodes (50 Hz: length / 50)."""
    rows = []
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if "episode/survival" in row:
            rows.append({"step": row["step"], "survival": row["episode/survival"],
                         "length_s": row["episode/length"] / 50.0, "return": row["episode/return"]})
    return rows


def curve_svg(rows: list[dict[str, float]], title: str, width: int = 640, height: int = 320,
              episode_s: float = 10.0) -> str:
    """An SVG line chart of survival (0-1, blue) and mean episode length / ``episode_s`` (orange) against env
    steps."""
    left, right, top, bottom = 50, 20, 30, 40
    steps = max(r["step"] for r in rows)

    def xy(step: float, value: float) -> str:
        x = left + (width - left - right) * step / steps
        y = top + (height - top - bottom) * (1.0 - min(max(value, 0.0), 1.0))
        return f"{x:.1f},{y:.1f}"

    survival = " ".join(xy(r["step"], r["survival"]) for r in rows)
    length = " ".join(xy(r["step"], r["length_s"] / episode_s) for r in rows)
    grid = "".join(f'<line x1="{left}" x2="{width - right}" y1="{y}" y2="{y}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y + 4}" font-size="11" text-anchor="end">{v:.2f}</text>'
                   for v in (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)
                   for y in [top + (height - top - bottom) * (1.0 - v)])
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>{grid}'
            f'<text x="{left}" y="18" font-size="13">{title}</text>'
            f'<text x="{width - right}" y="{height - 8}" font-size="11" text-anchor="end">'
            f'env steps (max {steps / 1e6:.1f} M)</text>'
            f'<polyline points="{survival}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>'
            f'<polyline points="{length}" fill="none" stroke="#ff7f0e" stroke-width="1.5"/>'
            f'<text x="{left + 8}" y="{height - 8}" font-size="11" fill="#1f77b4">survival (last 200 episodes)</text>'
            f'<text x="{left + 200}" y="{height - 8}" font-size="11" fill="#ff7f0e">'
            f"mean episode length / {episode_s:g} s</text>"
            "</svg>\n")


def run_task(run: Path) -> tuple[str, float]:
    """The run's G1 task (its ``config.yaml``) and episode length in seconds: the run's ``task.env.episode_s`` where
    it set one, else the task's own (g1_stand 10 s, g1_walk 20 s)."""
    task = yaml.safe_load((run / "config.yaml").read_text())["task"]
    configs = task_configs()
    if task["name"] not in configs:
        raise SystemExit(f"{run / 'config.yaml'}: task.name = {task['name']!r}; these benchmarks evaluate "
                         f"{sorted(configs)} runs")
    return task["name"], float((task.get("env") or {}).get("episode_s", configs[task["name"]].episode_s))


def evaluation_control(run: Path, max_step_change: float | None) -> dict[str, Any]:
    """The task ``control`` overrides to evaluate the run with: the run's own ``task.env.control`` (its action scale
    and the rate limit it trained under, if any), the rate limit replaced by ``max_step_change`` where given (the
    deploy safety layer's limit, applied in sim as ``sim.control.rate_limit``)."""
    from robot_rl.train.artifact_eval import training_control

    control = training_control(yaml.safe_load((run / "config.yaml").read_text()))
    if max_step_change is not None:
        control["max_step_change"] = max_step_change
    return control


def run_args(argv: list[str], doc: str, out: Path) -> argparse.Namespace:
    """The G1 evaluation benchmarks' command line: a run directory with its exported ``policy/``, ``--episodes``,
    ``--seed`` and ``--out`` (default ``out``); a bad count or a run without an artifact exits 2 naming it."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("run", type=Path, help="run directory of robot-rl train (metrics.jsonl, policy/)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=20_000, help="evaluation seed (not the training seed)")
    p.add_argument("--out", type=Path, default=out)
    p.add_argument("--max-step-change", type=float, default=None,
                   help="evaluate under this joint-target rate limit (rad per policy step, as the deploy safety layer "
                        "applies robot.yaml's safety.max_step_change; default: the limit the run trained under, "
                        "none if it trained without)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes {args.episodes}: must be >= 1")
    if args.max_step_change is not None and not 0 < args.max_step_change < float("inf"):
        p.error(f"--max-step-change {args.max_step_change}: must be a finite number > 0 (rad per policy step)")
    if not (args.run / "policy").is_dir():
        p.error(f"{args.run / 'policy'}: no exported artifact there; give a run directory of robot-rl train "
                "(or export one: robot-rl export <run>)")
    return args


def main(argv: list[str]) -> int:
    """Evaluate the run's artifact under every push condition; write rows, curve and SVG."""
    args = run_args(argv, __doc__, RESULTS / "g1_stand" / "survival.json")
    trained, episode_s = run_task(args.run)
    task = evaluation_task(trained, "stand")
    control = evaluation_control(args.run, args.max_step_change)
    rows = []
    for name, push in CONDITIONS.items():
        summary = survival_condition(args.run / "policy", args.episodes, args.seed, push, task, control)
        lo, hi = summary["survival_ci95"]
        print(f"{name}: survival {100 * summary['survival_rate']:.1f}% [95% CI {100 * lo:.1f}-{100 * hi:.1f}] "
              f"over {summary['episodes']} episodes, mean length {summary['length_mean'] / 50:.2f} s", flush=True)
        rows.append({"condition": name, "task": task, "push_velocity": push, "control": control, **summary})
    curve = curve_rows(args.run / "metrics.jsonl")
    last = json.loads((args.run / "metrics.jsonl").read_text().splitlines()[-1])
    final_eval = args.run / "eval.json"  # absent where the run was stopped before its final evaluation
    training = {"env_steps": last["step"], "wall_s": round(last["perf/wall_s"], 1),
                "final_eval": json.loads(final_eval.read_text()) if final_eval.is_file() else None}
    write_rows(args.out, rows, curve=curve, run=str(args.run), training=training)
    if curve:  # a g1_walk run's too
        args.out.with_suffix(".svg").write_text(curve_svg(curve, f"{trained} PPO: training survival",
                                                          episode_s=episode_s))
    else:
        print(f"no curve: {args.run / 'metrics.jsonl'} logs no episode/survival (a run from before it was logged)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
