"""Sim-to-sim transfer: exported policies through ROS 2 vs the same artifacts in their training sim.

For each ``--policy`` (one per training seed) and pooled over them, side by side: the success rate of
the training run's own final evaluation (``policy.yaml`` ``training.eval``), of ``--sim-episodes``
episodes of the ONNX artifact in the batched training env (``robot-rl eval``'s evaluation, on the
artifact's task with its randomisation and noise), and of ``--episodes`` episodes through ROS 2
(simulated robot node + policy node over DDS, ``--latency-ms`` command latency, ``--noise`` sensor
noise), with 95% Wilson intervals and the ROS/sim ratio with its 95% interval (Katz log method).
Target (issue 5): ROS >= 0.9 x the training evaluation (x the ONNX-in-sim figure for runs trained without one,
e.g. a VLA run with ``eval_episodes=0``). For a locomotion artifact (``g1_stand``, ``g1_walk``:
no success rule) the rate is survival: episodes that end by the time limit rather than a fall, with the
task's pushes in both sims (``--robot unitree_g1``).

    python benchmarks/sim2sim_transfer.py --policy runs/s0/policy --policy runs/s1/policy [--episodes 50]
    python benchmarks/sim2sim_transfer.py --robot unitree_g1 --policy runs/g1_stand/policy --episodes 20

Differences the ROS figure includes on purpose: real-time DDS transport, the command latency, sensor
noise, the safety layer (rate limit, clamping), and on reach tasks episodes that start where the last one
ended (targets are resampled, the arm is not reset; lift and locomotion episodes reset as the task does, and
the policy node drops its plans and last action on sim/episode, see docs/deploy.md); the first episode
(soft start) is not counted. The policy node's observation-to-command latency and the load average are
printed with each row, since a loaded machine delays commands beyond ``--latency-ms``.
The rows (one per policy), the pooled counts and
the ratio go to ``--json`` (default ``docs/results/deploy/sim2sim_transfer.json``, with the command, commit,
load and machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from pathlib import Path

from _results import RESULTS, write_rows

from robot_rl.commands.deploy import run_episodes
from robot_rl.deploy.artifact import load_meta
from robot_rl.deploy.node_procs import DEFAULT_SIM_RT_PRIORITY, plan_realtime
from robot_rl.deploy.node_report import node_counts
from robot_rl.train.artifact_eval import evaluate_artifact
from robot_rl.train.evaluation import Z95, wilson_interval

TARGET_RATIO = 0.9


def ratio_interval(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """``(k1/n1) / (k2/n2)`` and its 95% interval (Katz log method; 0.5 added to empty cells)."""
    if k1 == 0 or k2 == 0 or k1 == n1 or k2 == n2:
        k1, n1, k2, n2 = k1 + 0.5, n1 + 1, k2 + 0.5, n2 + 1
    ratio = (k1 / n1) / (k2 / n2)
    half = Z95 * math.sqrt(1 / k1 - 1 / n1 + 1 / k2 - 1 / n2)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def rate(k: int, n: int) -> str:
    """``"k/n = p% [lo-hi]"``."""
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} = {100 * k / n:.1f}% [{100 * lo:.1f}-{100 * hi:.1f}]"


def task_metric(task: str) -> str:
    """``survival`` (episodes that end by the time limit, not a fall) for a task without a success rule (locomotion:
    g1_stand, g1_walk), else ``success``."""
    import sim

    return "success" if sim.make_env(task, num_envs=1).has_success else "survival"


def rate_limit_params(max_step_change: float) -> dict[str, object]:
    """Policy node parameters for ``--max-step-change`` (rad per tick, every joint): none for 0 (robot.yaml's limit).

    Raises:
        ValueError: naming the value, for a negative or non-finite one.
    """
    if not (math.isfinite(max_step_change) and max_step_change >= 0):
        raise ValueError(f"--max-step-change {max_step_change}: must be a finite number of rad >= 0 (0: robot.yaml's)")
    return {"max_step_change": f"[{max_step_change}]"} if max_step_change else {}


def main() -> None:
    """Evaluate every policy both ways and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, action="append", required=True,
                        help="artifact directory; repeat for several training seeds")
    parser.add_argument("--robot", default="so101")
    parser.add_argument("--episodes", type=int, default=50, help="ROS episodes per policy (default 50)")
    parser.add_argument("--sim-episodes", type=int, default=100, help="training-sim episodes per policy")
    parser.add_argument("--episode-s", type=float, default=0.0,
                        help="ROS episode length (default 0: the task's, so101_reach 4 s, so101_lift 8 s)")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--noise", type=float, default=0.002, help="joint position noise std (rad); velocity 10x")
    parser.add_argument("--domain-id", type=int, default=78)
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="SCHED_FIFO priority of both nodes after the first episode (0: see --sim-rt-priority)")
    parser.add_argument("--sim-rt-priority", type=int, default=DEFAULT_SIM_RT_PRIORITY,
                        help="without --rt-priority: SCHED_FIFO priority of the simulated robot alone, where this "
                             "user may, as robot-rl deploy sim2sim (default %(default)s; 0: normal scheduling)")
    parser.add_argument("--max-step-change", type=float, default=0.0,
                        help="override the policy node's rate limit (rad per tick, all joints) to measure what the "
                             "robot.yaml limit costs a policy (default 0: robot.yaml's safety.max_step_change)")
    parser.add_argument("--json", type=Path, default=RESULTS / "deploy" / "sim2sim_transfer.json",
                        help="write the rows here (default: %(default)s)")
    args = parser.parse_args()
    if args.episodes < 1 or args.sim_episodes < 1:
        parser.error("--episodes and --sim-episodes must be >= 1")
    try:
        node_params = rate_limit_params(args.max_step_change)
    except ValueError as exc:
        parser.error(str(exc))

    realtime = plan_realtime(args.rt_priority, args.sim_rt_priority)
    print(realtime.note, flush=True)
    rows = []
    for i, policy in enumerate(args.policy):
        meta = load_meta(policy)
        train_eval = (meta.training or {}).get("eval", {})
        in_sim = evaluate_artifact(policy, args.sim_episodes, min(args.sim_episodes, 16), seed=0)
        metric = task_metric(in_sim["task"])
        load0 = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "stats.json"
            ros = run_episodes(policy, args.robot, args.episodes, args.episode_s, args.latency_ms, args.noise,
                               args.domain_id, seed=1 + i, policy_params={"stats_file": str(stats_file), **node_params},
                               rt_priority=realtime.priority, rt_nodes=realtime.nodes)
            stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        median = sorted(d for _, d in ros)[len(ros) // 2]  # final distance (m), or episode length (s)
        row = {
            "policy": str(policy), "task": in_sim["task"], "metric": metric,
            "train_k": round(train_eval.get(f"{metric}_rate", 0.0) * train_eval.get("episodes", 0)),  # none: 0 of 0
            "train_n": int(train_eval.get("episodes", 0)),
            "sim_k": round(in_sim[f"{metric}_rate"] * in_sim["episodes"]), "sim_n": in_sim["episodes"],
            "ros_k": int(sum(s for s, _ in ros)), "ros_n": len(ros),
            **({"ros_median_length_s": median} if metric == "survival" else {"ros_median_cm": 100 * median}),
            "latency_p50_ms": stats.get("latency_p50_ms", float("nan")),
            "latency_p99_ms": stats.get("latency_p99_ms", float("nan")),
            **node_counts(stats),
            "load": (load0, os.getloadavg()[0]),
        }
        rows.append(row)
        print(f"[{i + 1}/{len(args.policy)}] {policy}: ROS {rate(row['ros_k'], row['ros_n'])}; node: "
              f"{row['node_rate_limited']}/{row['node_commands']} commands rate-limited, "
              f"{row['node_inferences']} inferences, {row['node_vla_hold']} VLA holds"
              + (f", camera frames {row['image_age_p50_ms']:.0f}/{row['image_age_p99_ms']:.0f} ms (p50/p99) behind "
                 "the joint state" if math.isfinite(row["image_age_p50_ms"]) else ""), flush=True)

    pooled = {k: sum(r[k] for r in rows) for k in ("train_k", "train_n", "sim_k", "sim_n", "ros_k", "ros_n")}
    scheduling = "normal scheduling"
    if realtime.priority:
        scheduling = f"SCHED_FIFO {realtime.priority}" + (f" ({', '.join(realtime.nodes)} only)" if realtime.nodes
                                                           else "")
    metrics = sorted({r["metric"] for r in rows})
    print(f"\nsim2sim transfer, {args.robot} ({' and '.join(metrics)} rates): ROS 2 with {args.latency_ms:g} ms "
          f"command latency and {args.noise:g} rad / {10 * args.noise:g} rad/s sensor noise, {args.episodes} ROS "
          f"episodes and {args.sim_episodes} training-sim episodes per policy, "
          f"{scheduling}")
    header = f"{'policy':28s} {'training eval':>24s} {'ONNX in training sim':>24s} {'ROS 2 sim2sim':>24s}"
    print(header + f" {'ROS/train [95% CI]':>22s} {'ROS/ONNX':>9s} {'obs->cmd p50/p99 ms':>20s} {'load':>10s}")
    for r in [*rows, {**pooled, "policy": "pooled"}]:
        has_train = r["train_n"] > 0
        train = rate(r["train_k"], r["train_n"]) if has_train else "-"
        ratio, lo, hi = ratio_interval(r["ros_k"], r["ros_n"], r["train_k"], r["train_n"]) if has_train else (
            float("nan"),) * 3
        ratio_sim = ratio_interval(r["ros_k"], r["ros_n"], r["sim_k"], r["sim_n"])[0]
        timing = (f"{r['latency_p50_ms']:.2f}/{r['latency_p99_ms']:.2f}" if "latency_p50_ms" in r else "")
        load = f"{r['load'][0]:.1f}-{r['load'][1]:.1f}" if "load" in r else ""
        name = Path(r["policy"]).parent.name or r["policy"]
        print(f"{name[-28:]:28s} {train:>24s} {rate(r['sim_k'], r['sim_n']):>24s} {rate(r['ros_k'], r['ros_n']):>24s} "
              f"{f'{ratio:.2f} [{lo:.2f}-{hi:.2f}]':>22s} {ratio_sim:9.2f} {timing:>20s} {load:>10s}")
    basis = "training-eval" if pooled["train_n"] > 0 else "ONNX-in-sim"  # a run trained with eval_episodes=0
    ref = "train" if pooled["train_n"] > 0 else "sim"
    ratio = ratio_interval(pooled["ros_k"], pooled["ros_n"], pooled[f"{ref}_k"], pooled[f"{ref}_n"])
    verdict = "meets" if ratio[0] >= TARGET_RATIO else "MISSES"
    print(f"pooled ROS/{basis} ratio {ratio[0]:.2f} [95% CI {ratio[1]:.2f}-{ratio[2]:.2f}]: {verdict} the "
          f"target >= {TARGET_RATIO:g}")
    write_rows(args.json, rows, settings={k: str(v) for k, v in vars(args).items()} | {"scheduling": scheduling},
               pooled=pooled, ratio=ratio, ratio_basis=basis)


if __name__ == "__main__":
    main()
