"""Sim-to-sim transfer: an exported policy through ROS 2 vs the same artifact in the training sim.

Side by side: success rate of ``--episodes`` episodes in the batched training env (``robot-rl
eval``'s ONNX Runtime evaluation) and through ROS 2 (simulated robot node + policy node over DDS,
with command latency and sensor noise), and their ratio. Target (issue 5): ROS >= 90% of sim.

    python benchmarks/sim2sim_transfer.py --policy outputs/<run>/policy [--episodes 30] [--latency-ms 5]

Differences the ROS figure includes on purpose: real-time DDS transport, the command latency, sensor
noise, the safety layer (rate limit, clamping), and episodes that start where the last one ended
(targets are resampled, the arm is not reset); the first episode (soft start) is not counted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from robot_rl.commands.deploy import run_episodes
from robot_rl.train.artifact_eval import evaluate_artifact


def main() -> None:
    """Evaluate both ways and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, required=True, help="artifact directory")
    parser.add_argument("--robot", default="so101")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--episode-s", type=float, default=4.0, help="ROS episode length (the task's is 4 s)")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--noise", type=float, default=0.002, help="joint position noise std (rad)")
    parser.add_argument("--domain-id", type=int, default=78)
    args = parser.parse_args()

    in_sim = evaluate_artifact(args.policy, args.episodes, min(args.episodes, 16), seed=0)
    ros = run_episodes(args.policy, args.robot, args.episodes, args.episode_s, args.latency_ms, args.noise,
                       args.domain_id, seed=1)
    ros_success = sum(s for s, _ in ros) / len(ros)
    sim_success = in_sim["success_rate"]
    ratio = ros_success / sim_success if sim_success else float("nan")
    print(f"{args.policy} ({in_sim['task']}), {args.episodes} episodes each")
    print(f"{'':28s} {'training sim':>13s} {'ROS sim2sim':>12s} {'ros/sim':>8s}")
    print(f"{'success rate':28s} {sim_success:13.3f} {ros_success:12.3f} {ratio:8.2f}   target >= 0.90")
    print(f"{'success 95% CI (sim)':28s} {in_sim['success_ci95'][0]:6.3f}-{in_sim['success_ci95'][1]:.3f}")
    print(f"ROS: {args.latency_ms:g} ms command latency, {args.noise:g} rad position noise; "
          f"median final distance {sorted(d for _, d in ros)[len(ros) // 2] * 100:.2f} cm")
    print("meets target" if ratio >= 0.9 else "MISSES target")


if __name__ == "__main__":
    main()
