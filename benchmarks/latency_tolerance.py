"""How much command latency a policy artifact tolerates, in the training sim: its success (or survival) against latency.

    python benchmarks/latency_tolerance.py --policy runs/g1_walk/policy [--policy ...] \
        [--latency-ms 0 5 10 20] [--episodes 100] [--out docs/results/deploy/latency_tolerance.json]

Each ``--policy`` artifact is evaluated through onnxruntime, as ``robot-rl eval --latency-ms`` does, on its own
task (with its run's ``task.env.control``) at every ``--latency-ms``: every command reaches the motors that many ms
late in every env (MuJoCo's actuator delay at physics resolution, replacing the task's own delay range). The rate is
success for a task with a success rule and survival (episodes that end by the time limit) for locomotion, with its
Wilson 95% interval, and the ratio to the same policy at the first latency. Same evaluation seed at every latency,
so the rows differ only by the delay.

Why: over ROS 2 a command lands ``sim2sim --latency-ms`` (a robot's bus) plus the policy node's compute plus DDS after
the state it answers, ~7-8 ms at the documented 5 ms here; a policy trained without latency can lose much of its
success to that alone (docs/deploy.md "Before you touch hardware"). Train with ``task.env.randomization``'s
``actuator_delay_s`` covering the loop's latency where the curve falls.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _results import RESULTS, write_rows
from sim2sim_transfer import rate as rate_text
from sim2sim_transfer import task_metric

from robot_rl.commands._args import number, positive


def tolerance_rows(policy: Path, latencies_ms: list[float], episodes: int, seed: int) -> list[dict[str, Any]]:
    """One row per latency: ``{policy, task, metric, latency_ms, k, n, rate, ci95, length_mean, ratio_to_first}``."""
    from robot_rl.train.artifact_eval import evaluate_artifact

    rows: list[dict[str, Any]] = []
    metric = None
    for latency in latencies_ms:
        summary = evaluate_artifact(policy, episodes, min(episodes, 64), seed, latency_s=latency / 1e3)
        metric = metric or task_metric(summary["task"])  # the artifact's task: the same at every latency
        rate = summary[f"{metric}_rate"]
        rows.append({"policy": str(policy), "task": summary["task"], "metric": metric, "latency_ms": latency,
                     "k": round(rate * summary["episodes"]), "n": summary["episodes"], "rate": rate,
                     "ci95": summary[f"{metric}_ci95"], "length_mean": summary["length_mean"]})
        first = rows[0]["rate"]
        rows[-1]["ratio_to_first"] = rate / first if first > 0 else None
        print(f"{policy} at {latency:g} ms: {metric} {rate_text(rows[-1]['k'], rows[-1]['n'])}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per policy, one column per latency (rate [interval])."""
    latencies = sorted({r["latency_ms"] for r in rows})
    lines = ["| policy (metric) | " + " | ".join(f"{x:g} ms" for x in latencies) + " |",
             "|---|" + "---|" * len(latencies)]
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = {r["latency_ms"]: r for r in rows if r["policy"] == policy}
        cells = [f"{100 * mine[x]['rate']:.0f}% [{100 * mine[x]['ci95'][0]:.0f}-{100 * mine[x]['ci95'][1]:.0f}]"
                 if x in mine else "" for x in latencies]
        lines.append(f"| {policy} ({next(iter(mine.values()))['metric']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", type=Path, action="append", required=True,
                   help="an exported artifact (policy.yaml + policy.onnx); repeat for several")
    p.add_argument("--latency-ms", type=number(0.0, 1000.0), nargs="+", default=[0.0, 5.0, 10.0, 20.0],
                   help="command latencies to evaluate at, ms in [0, 1000] (as robot-rl eval --latency-ms)")
    p.add_argument("--episodes", type=positive, default=100)
    p.add_argument("--seed", type=int, default=20_000, help="evaluation seed, the same at every latency")
    p.add_argument("--out", type=Path, default=RESULTS / "deploy" / "latency_tolerance.json")
    args = p.parse_args(argv)
    for policy in args.policy:
        if not (policy / "policy.yaml").is_file():
            p.error(f"{policy}: no policy.yaml there; give an exported artifact (robot-rl export <run>)")
    rows = [row for policy in args.policy for row in tolerance_rows(policy, args.latency_ms, args.episodes, args.seed)]
    print(table(rows))
    write_rows(args.out, rows, settings={"episodes": args.episodes, "seed": args.seed,
                                                    "latency_ms": args.latency_ms})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
