"""``robot-rl deploy``: check a policy artifact against a robot; run it sim-to-sim over ROS 2."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

SUMMARY = "check a policy artifact against a robot, or run it sim-to-sim over ROS 2 (sim2sim | check)"

EPILOG = """examples:
  robot-rl deploy check outputs/run/policy --robot so101
  robot-rl deploy sim2sim --robot so101 --policy outputs/run/policy --episodes 20 --latency-ms 5 --noise 0.002
  robot-rl deploy sim2sim --robot so101 --policy outputs/run/policy --print-commands

sim2sim starts the nodes of ros_nodes/launch/sim2sim.launch.yaml (the simulated robot and the policy
node) with the exact command lines `ros2 launch ros_nodes sim2sim.launch.yaml` would run, so it
works with only the `[ros]` extra installed (pip install -e ".[ros]"). See docs/deploy.md."""


def _check(args: argparse.Namespace) -> int:
    from robot_rl.deploy.artifact import ArtifactError
    from robot_rl.deploy.checks import check_artifact
    from sim.robots import load_robot

    try:
        report = check_artifact(Path(args.policy), load_robot(args.robot).as_dict(), runs=args.runs)
    except ArtifactError as exc:
        print(f"REFUSED: {exc}", file=sys.stderr)
        return 1
    for line in report.lines:
        print(line)
    return 1 if report.errors else 0


def _sim2sim(args: argparse.Namespace) -> int:
    from robot_rl.deploy.node_procs import NodeProcesses

    extra = {"sim_robot": {"command_latency_s": args.latency_ms / 1e3, "position_noise": args.noise,
                           "velocity_noise": 10 * args.noise, "seed": args.seed}}
    if args.episodes:
        from robot_rl.deploy.artifact import load_meta

        task = load_meta(args.policy).task
        if not task:
            print("--episodes needs the artifact's task (policy.yaml `task`), which is empty", file=sys.stderr)
            return 2
        extra["sim_robot"] |= {"task": task, "episode_s": args.episode_s}
    launch_args = {"robot": args.robot, "policy": str(Path(args.policy).resolve()), "namespace": args.namespace}
    nodes = NodeProcesses(args.launch, launch_args, args.domain_id, extra=extra)
    if args.print_commands:
        for name, cmd in nodes.commands.items():
            print(f"# {name}\n{' '.join(cmd)}")
    if not args.episodes:
        try:
            while not nodes.exited():
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        return max(nodes.stop().values(), default=0)
    return _count_episodes(nodes, args)


def _count_episodes(nodes, args: argparse.Namespace) -> int:
    os.environ.update({k: nodes.env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    import rclpy
    from std_msgs.msg import Float64MultiArray

    rclpy.init(domain_id=args.domain_id)
    node = rclpy.create_node("sim2sim_monitor", namespace=args.namespace or None)
    results: list[tuple[float, float]] = []
    node.create_subscription(Float64MultiArray, "sim/episode", lambda m: results.append((m.data[1], m.data[2])), 10)
    deadline = time.monotonic() + 60 + args.episodes * args.episode_s * 3
    try:
        while len(results) < args.episodes and time.monotonic() < deadline and not nodes.exited():
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        codes = nodes.stop()
        node.destroy_node()
        rclpy.try_shutdown()
    if not results:
        print(f"no episode finished; node exit codes {codes}", file=sys.stderr)
        return 1
    success = sum(s for s, _ in results) / len(results)
    print(f"sim2sim {args.robot}: {len(results)} episodes, success {success:.1%}, "
          f"median final distance {sorted(d for _, d in results)[len(results) // 2] * 100:.2f} cm "
          f"(latency {args.latency_ms:g} ms, noise {args.noise:g} rad)")
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``robot-rl deploy``."""
    parser = argparse.ArgumentParser(prog="robot-rl deploy", description=SUMMARY, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate an artifact for a robot: schema, joints, scales, inference")
    check.add_argument("policy", help="artifact directory (policy.yaml + policy.onnx)")
    check.add_argument("--robot", required=True, help="hardware/<robot>/robot.yaml name, e.g. so101")
    check.add_argument("--runs", type=int, default=200, help="inference runs timed (default 200)")
    sim = sub.add_parser("sim2sim", help="simulated robot + policy node over ROS 2 (DDS on loopback)",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--robot", default="so101", help="robot name (default so101)")
    sim.add_argument("--policy", required=True, help="artifact directory")
    sim.add_argument("--namespace", default="", help="ROS namespace of both nodes")
    sim.add_argument("--domain-id", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "0")),
                     help="ROS_DOMAIN_ID (default $ROS_DOMAIN_ID or 0)")
    sim.add_argument("--episodes", type=int, default=0,
                     help="play N reach episodes, print the success rate and stop (0: run until Ctrl-C)")
    sim.add_argument("--episode-s", type=float, default=4.0, help="episode length in seconds (default 4)")
    sim.add_argument("--latency-ms", type=float, default=0.0, help="command latency of the simulated robot")
    sim.add_argument("--noise", type=float, default=0.0, help="joint position noise std (rad); velocity 10x")
    sim.add_argument("--seed", type=int, default=0, help="seed of the simulated robot")
    sim.add_argument("--launch", default="sim2sim.launch.yaml", help="launch file (name in ros_nodes/launch or path)")
    sim.add_argument("--print-commands", action="store_true", help="print each node's command line")
    args = parser.parse_args(argv)
    return _check(args) if args.action == "check" else _sim2sim(args)
