"""Deployment latency over DDS: policy node at 50 Hz against the simulated SO-101 at 500 Hz.

For each rclpy executor of the policy node (the default SingleThreadedExecutor and rclpy's
EventsExecutor) it runs sim2sim for ``--duration`` seconds and prints, side by side and as a ratio:

* observation-to-command latency (JointState header stamp -> command publish, wall clock across the
  two processes), split into *receive* (stamp -> the policy node's callback: the simulated robot's
  publish, DDS, the executor's wake-up) and *compute* (callback -> publish: the node's own work:
  observation, ONNX Runtime, safety layer, message);
* control loop period jitter (std and worst deviation from 20 ms), policy inference time;
* CPU use of each node (% of one core, and CPU seconds), and the load average before/after.

Targets (issue 5): p99 latency <= 2 ms, jitter std <= 1 ms. With ``--repeats N`` the executors run
interleaved (single, events, single, events, ...) and the table pools every run's samples, so a
load change on a shared machine hits both alike.

    python benchmarks/deploy_latency.py [--policy ARTIFACT] [--duration 60] [--repeats 1] [--rt-priority 50]

Without ``--policy`` it exports an untrained so101_reach-shaped MLP (256-128-64, as the PPO actor).
Each run's figures (one row per executor and repeat) and the pooled ones go to ``--json``
(default ``docs/results/deploy/deploy_latency.json``, with the command, commit, load and machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import RESULTS, write_rows

from robot_rl.deploy.node_procs import NodeProcesses

TARGET_P99_MS, TARGET_JITTER_STD_MS = 2.0, 1.0
PERIOD_MS = 20.0
EXECUTORS = ("single", "events")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def export_default_policy(out: Path) -> Path:
    """An untrained so101_reach-shaped actor (inference cost of a real one)."""
    import torch

    from robot_rl.export import PolicyHead, export_policy, make_meta
    from sim.robots import load_robot

    robot = load_robot("so101")
    layout = [("joint_pos", 6, 1.0), ("joint_vel", 6, 0.1), ("target_pos", 3, 1.0), ("last_action", 6, 1.0)]
    meta = make_meta("so101", robot.joint_names, [j.default for j in robot.joints], layout,
                     robot.control.action_scale, 1e3 / PERIOD_MS, task="so101_reach")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(21, 256), torch.nn.ELU(), torch.nn.Linear(256, 128), torch.nn.ELU(),
                              torch.nn.Linear(128, 64), torch.nn.ELU(), torch.nn.Linear(64, 6))
    return export_policy(PolicyHead(net, meta), meta, out, formats=("onnx",))


def run(policy: Path, executor: str, duration: float, domain_id: int, work: Path, rt_priority: int = 0
        ) -> dict[str, object]:
    """One sim2sim run: the policy node's raw samples, CPU use of both nodes, load average.

    ``rt_priority > 0`` puts every thread of both nodes in SCHED_FIFO at that priority (``chrt``), as on
    a robot computer that gives its control processes real-time priority.
    """
    stats_file = work / f"stats_{executor}.json"
    extra = {
        "policy_node": {"control_hz": 1e3 / PERIOD_MS, "executor": executor, "stats_file": str(stats_file),
                        "stats_samples": True, "stats_capacity": int((duration + 60) * 1e3 / PERIOD_MS)},
        "sim_robot": {"physics_dt": 0.002, "publish_hz": 500.0, "task": "so101_reach", "episode_s": 4.0},
    }
    nodes = NodeProcesses("sim2sim.launch.yaml", {"policy": str(policy)}, domain_id, work, extra=extra)
    try:
        deadline = time.monotonic() + 90
        while "commands on" not in nodes.log("policy_node") or "simulated" not in nodes.log("sim_robot"):
            if time.monotonic() > deadline or nodes.exited():
                raise RuntimeError(f"nodes did not start: {nodes.log('policy_node')}{nodes.log('sim_robot')}")
            time.sleep(0.1)
        if rt_priority:
            for proc in nodes.procs.values():
                subprocess.run(["chrt", "-a", "-f", "-p", str(rt_priority), str(proc.pid)], check=True)
        time.sleep(3.0)  # warm-up: discovery, soft start
        load0 = os.getloadavg()[0]
        cpu0 = {n: cpu_seconds(p.pid) for n, p in nodes.procs.items()}
        # the node's samples are cut to this window: it records a monotonic timestamp per tick
        t0 = time.monotonic()
        time.sleep(duration)
        t1 = time.monotonic()
        cpu = {n: cpu_seconds(p.pid) - cpu0[n] for n, p in nodes.procs.items()}
        load1 = os.getloadavg()[0]
    finally:
        codes = nodes.stop()
    if codes.get("policy_node") != 0:
        raise RuntimeError(f"policy node exited with {codes}: {nodes.log('policy_node')[-2000:]}")
    samples = json.loads(stats_file.read_text())["samples"]
    window = (np.asarray(samples["tick_time"]) >= t0) & (np.asarray(samples["tick_time"]) <= t1)
    out: dict[str, object] = {k: np.asarray(v)[window] for k, v in samples.items()
                              if len(v) == len(window)}
    wall = t1 - t0
    out |= {"wall_s": wall, "cpu_policy_s": cpu["policy_node"], "cpu_sim_s": cpu["sim_robot"],
            "load": (load0, load1)}
    return out


def pooled(runs: list[dict[str, object]]) -> dict[str, float]:
    """Percentiles over every run's samples, CPU shares and load averages."""
    cat = {k: np.concatenate([r[k] for r in runs]) for k in ("latency_ms", "receive_ms", "compute_ms",
                                                              "inference_ms", "period_ms")}
    out: dict[str, float] = {}
    for name in ("latency_ms", "receive_ms", "compute_ms", "inference_ms"):
        x = cat[name][np.isfinite(cat[name])]
        out |= {f"{name}_p50": np.percentile(x, 50), f"{name}_p99": np.percentile(x, 99), f"{name}_max": x.max()}
    period = cat["period_ms"][np.isfinite(cat["period_ms"])]
    wall = sum(r["wall_s"] for r in runs)
    out |= {
        "period_mean": period.mean(), "period_std": period.std(),
        "period_worst": np.abs(period - PERIOD_MS).max(),
        "cpu_policy_pct": 100 * sum(r["cpu_policy_s"] for r in runs) / wall,
        "cpu_sim_pct": 100 * sum(r["cpu_sim_s"] for r in runs) / wall,
        "cpu_policy_s": sum(r["cpu_policy_s"] for r in runs),
        "commands": len(cat["latency_ms"]),
        "load": float(np.mean([np.mean(r["load"]) for r in runs])),
    }
    return out


ROWS = [
    ("obs->command latency p50 (ms)", "latency_ms_p50", None),
    ("obs->command latency p99 (ms)", "latency_ms_p99", TARGET_P99_MS),
    ("obs->command latency max (ms)", "latency_ms_max", None),
    ("  receive p50 (ms)", "receive_ms_p50", None),
    ("  receive p99 (ms)", "receive_ms_p99", None),
    ("  compute p50 (ms)", "compute_ms_p50", None),
    ("  compute p99 (ms)", "compute_ms_p99", None),
    ("  inference p50 (ms)", "inference_ms_p50", None),
    ("  inference p99 (ms)", "inference_ms_p99", None),
    ("loop period mean (ms)", "period_mean", None),
    ("loop period jitter std (ms)", "period_std", TARGET_JITTER_STD_MS),
    ("loop period worst |dev| (ms)", "period_worst", None),
    ("CPU policy node (% core)", "cpu_policy_pct", None),
    ("CPU sim robot node (% core)", "cpu_sim_pct", None),
    ("CPU policy node (s)", "cpu_policy_s", None),
    ("commands measured", "commands", None),
    ("load average (mean)", "load", None),
]


def main() -> None:
    """Run both executors (interleaved) and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, help="artifact (default: an untrained so101_reach-shaped MLP)")
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per run (default 60)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per executor, interleaved (default 1)")
    parser.add_argument("--domain-id", type=int, default=77)
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="SCHED_FIFO priority for both nodes' threads via chrt (0: normal scheduling)")
    parser.add_argument("--json", type=Path, default=RESULTS / "deploy" / "deploy_latency.json",
                        help="write the per-run and pooled figures here (default: %(default)s)")
    args = parser.parse_args()
    if args.duration <= 0 or args.repeats < 1:
        parser.error(f"--duration {args.duration} must be > 0 and --repeats {args.repeats} >= 1")
    start_load = os.getloadavg()
    runs: dict[str, list] = {ex: [] for ex in EXECUTORS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        policy = args.policy or export_default_policy(work / "policy")
        for i in range(args.repeats):
            for ex in EXECUTORS:
                print(f"[{i + 1}/{args.repeats}] {ex}: {args.duration:g} s (load {os.getloadavg()[0]:.2f})",
                      flush=True)
                runs[ex].append(run(policy, ex, args.duration, args.domain_id, work, args.rt_priority))
    results = {ex: pooled(r) for ex, r in runs.items()}
    sched = f"SCHED_FIFO {args.rt_priority}" if args.rt_priority else "normal scheduling"
    print(f"\npolicy node {1e3 / PERIOD_MS:g} Hz vs simulated SO-101 500 Hz over DDS (loopback), "
          f"{args.repeats} x {args.duration:g} s per executor, {os.cpu_count()} CPUs, {sched}; load average "
          f"at start {start_load[0]:.2f} / {start_load[1]:.2f} / {start_load[2]:.2f} (1/5/15 min), "
          f"at end {os.getloadavg()[0]:.2f}")
    print(f"{'metric':32s} {'SingleThreaded':>15s} {'EventsExecutor':>15s} {'events/single':>14s} {'target':>8s}")
    for label, key, target in ROWS:
        a, b = float(results["single"][key]), float(results["events"][key])
        ratio = f"{b / a:14.2f}" if a else f"{'-':>14s}"
        tgt = f"<= {target:g}" if target is not None else ""
        print(f"{label:32s} {a:15.3f} {b:15.3f} {ratio} {tgt:>8s}")
    for ex in EXECUTORS:
        r = results[ex]
        p99, jitter = r["latency_ms_p99"], r["period_std"]
        print(f"{ex}: p99 latency {p99:.2f} ms {'meets' if p99 <= TARGET_P99_MS else 'MISSES'} "
              f"<= {TARGET_P99_MS:g} ms; jitter std {jitter:.2f} ms "
              f"{'meets' if jitter <= TARGET_JITTER_STD_MS else 'MISSES'} <= {TARGET_JITTER_STD_MS:g} ms")
    rows = [{"executor": ex, "repeat": i, **pooled([r])} for ex, rs in runs.items() for i, r in enumerate(rs)]
    write_rows(args.json, rows, settings={k: str(v) for k, v in vars(args).items()}, pooled=results)


if __name__ == "__main__":
    main()
