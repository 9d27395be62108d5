"""Deployment latency over DDS: policy node at 50 Hz against the simulated SO-101 at 500 Hz.

For each rclpy executor of the policy node (the default SingleThreadedExecutor and rclpy's
EventsExecutor) it runs sim2sim for ``--duration`` seconds and prints, side by side and as a ratio:
observation-to-command latency p50/p99 (JointState header stamp -> command publish), control loop
period jitter (std, worst deviation from 20 ms), policy inference time and the CPU use of each node.
Targets (issue 5): p99 latency <= 2 ms, jitter std <= 1 ms.

    python benchmarks/deploy_latency.py [--policy ARTIFACT] [--duration 60] [--rt-priority 50]

Without ``--policy`` it exports an untrained so101_reach-shaped MLP (256-128-64, as the PPO actor).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from robot_rl.deploy.node_procs import NodeProcesses

TARGET_P99_MS, TARGET_JITTER_STD_MS = 2.0, 1.0


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
                     robot.control.action_scale, 50.0, task="so101_reach")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(21, 256), torch.nn.ELU(), torch.nn.Linear(256, 128), torch.nn.ELU(),
                              torch.nn.Linear(128, 64), torch.nn.ELU(), torch.nn.Linear(64, 6))
    return export_policy(PolicyHead(net, meta), meta, out, formats=("onnx",))


def run(policy: Path, executor: str, duration: float, domain_id: int, work: Path, rt_priority: int = 0
        ) -> dict[str, float]:
    """One sim2sim run; the policy node's statistics plus CPU use of both nodes (% of one core).

    ``rt_priority > 0`` puts every thread of both nodes in SCHED_FIFO at that priority (``chrt``), as on
    a robot computer that gives its control processes real-time priority.
    """
    stats_file = work / f"stats_{executor}.json"
    extra = {
        "policy_node": {"control_hz": 50.0, "executor": executor, "stats_file": str(stats_file)},
        "sim_robot": {"physics_dt": 0.002, "publish_hz": 500.0, "task": "so101_reach", "episode_s": 4.0},
    }
    nodes = NodeProcesses("sim2sim.launch.yaml", {"policy": str(policy)}, domain_id, work, extra=extra)
    try:
        deadline = time.monotonic() + 60
        while "commands on" not in nodes.log("policy_node") or "simulated" not in nodes.log("sim_robot"):
            if time.monotonic() > deadline or nodes.exited():
                raise RuntimeError(f"nodes did not start: {nodes.log('policy_node')}{nodes.log('sim_robot')}")
            time.sleep(0.1)
        if rt_priority:
            for proc in nodes.procs.values():
                subprocess.run(["chrt", "-a", "-f", "-p", str(rt_priority), str(proc.pid)], check=True)
        time.sleep(3.0)  # warm-up: discovery, soft start
        cpu0 = {n: cpu_seconds(p.pid) for n, p in nodes.procs.items()}
        t0 = time.monotonic()
        time.sleep(duration)
        wall = time.monotonic() - t0
        cpu = {n: 100 * (cpu_seconds(p.pid) - cpu0[n]) / wall for n, p in nodes.procs.items()}
    finally:
        codes = nodes.stop()
    if codes.get("policy_node") != 0:
        raise RuntimeError(f"policy node exited with {codes}: {nodes.log('policy_node')[-2000:]}")
    stats = json.loads(stats_file.read_text())
    stats["period_worst_dev_ms"] = max(abs(stats["period_max_ms"] - 20.0), abs(20.0 - stats.get("period_min_ms", 20.0)))
    stats |= {"cpu_policy_pct": cpu["policy_node"], "cpu_sim_pct": cpu["sim_robot"]}
    return stats


def main() -> None:
    """Run both executors and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, help="artifact (default: an untrained so101_reach-shaped MLP)")
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per executor (default 60)")
    parser.add_argument("--domain-id", type=int, default=77)
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="SCHED_FIFO priority for both nodes' threads via chrt (0: normal scheduling)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        policy = args.policy or export_default_policy(work / "policy")
        results = {ex: run(policy, ex, args.duration, args.domain_id, work, args.rt_priority)
                   for ex in ("single", "events")}
    rows = [
        ("obs->command latency p50 (ms)", "latency_p50_ms", None),
        ("obs->command latency p99 (ms)", "latency_p99_ms", TARGET_P99_MS),
        ("loop period mean (ms)", "period_mean_ms", None),
        ("loop period jitter std (ms)", "period_std_ms", TARGET_JITTER_STD_MS),
        ("loop period worst |dev| (ms)", "period_worst_dev_ms", None),
        ("inference p50 (ms)", "inference_p50_ms", None),
        ("inference p99 (ms)", "inference_p99_ms", None),
        ("CPU policy node (% core)", "cpu_policy_pct", None),
        ("CPU sim robot node (% core)", "cpu_sim_pct", None),
        ("commands published", "commands", None),
    ]
    sched = f"SCHED_FIFO {args.rt_priority}" if args.rt_priority else "normal scheduling"
    print(f"policy node 50 Hz vs simulated SO-101 500 Hz over DDS (loopback), {args.duration:g} s per executor, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, {sched}")
    print(f"{'metric':32s} {'SingleThreaded':>15s} {'EventsExecutor':>15s} {'events/single':>14s} {'target':>8s}")
    for label, key, target in rows:
        a, b = float(results["single"].get(key, float("nan"))), float(results["events"].get(key, float("nan")))
        ratio = b / a if a else float("nan")
        tgt = f"<= {target:g}" if target is not None else ""
        print(f"{label:32s} {a:15.3f} {b:15.3f} {ratio:14.2f} {tgt:>8s}")
    for ex in ("single", "events"):
        r = results[ex]
        verdict = [f"p99 {'meets' if r['latency_p99_ms'] <= TARGET_P99_MS else 'MISSES'} {TARGET_P99_MS:g} ms",
                   f"jitter {'meets' if r['period_std_ms'] <= TARGET_JITTER_STD_MS else 'MISSES'} "
                   f"{TARGET_JITTER_STD_MS:g} ms"]
        print(f"{ex}: " + ", ".join(verdict))


if __name__ == "__main__":
    main()
