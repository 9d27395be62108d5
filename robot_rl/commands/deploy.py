"""``robot-rl deploy``: check a policy artifact against a robot; run it sim-to-sim over ROS 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.commands._args import command_parser, count, domain_id, duration, integer, number, positive, seed
from robot_rl.deploy.node_procs import DEFAULT_SIM_RT_PRIORITY, plan_realtime
from robot_rl.errors import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from robot_rl.deploy.artifact import PolicyMeta

SUMMARY = "Check a policy artifact against a robot, or run it sim-to-sim over ROS 2 (sim2sim | check)"

EPILOG = """examples:
  robot-rl deploy check outputs/run/policy --robot so101
  robot-rl deploy sim2sim --robot so101 --policy outputs/run/policy --episodes 20 --latency-ms 5 --noise 0.002
  robot-rl deploy sim2sim --robot so101 --policy outputs/run/policy --print-commands
  robot-rl deploy sim2sim --policy outputs/lift_run/policy --episodes 20 --latency-ms 5 --noise 0.002
  robot-rl deploy sim2sim --policy outputs/vla_run/policy --episodes 10

sim2sim plays the artifact's own task (policy.yaml `task`): so101_reach (targets), so101_lift (the
simulated robot holds the cube scene and publishes the cube pose on the object topic) or, for a VLA artifact,
so101_reach_lang or so101_pick_lang (the simulated robot publishes the instruction and the artifact's camera
images, and scores pick with the task's own lift rule; set MUJOCO_GL=egl EGL_PLATFORM=surfaceless where EGL is
available, else OSMesa renders).

check exits 2 when it refuses the artifact or robot.yaml (bad input: the policy node refuses the same
artifact with the same message), 1 when the artifact is readable but a check reports ERROR lines, 0 when
it is fit to run. sim2sim starts the nodes of ros_nodes/launch/sim2sim.launch.yaml (the simulated robot and the policy
node) with the exact command lines `ros2 launch ros_nodes sim2sim.launch.yaml` would run, so it
works with only the `[ros]` extra installed (pip install -e ".[ros]"). See docs/deploy.md."""


def _check(args: argparse.Namespace) -> int:
    """Exit 2: the artifact (or robot.yaml) is refused; 1: readable, but a check found ERROR lines; 0: OK."""
    from robot_rl.deploy.artifact import ArtifactError
    from robot_rl.deploy.checks import check_artifact
    from sim.robots import load_robot

    robot = load_robot(args.robot).as_dict()  # a refused robot.yaml: RobotConfigError, exit 2 in robot_rl.cli
    try:
        report = check_artifact(Path(args.policy), robot, runs=args.runs)
    except ArtifactError as exc:
        print(f"REFUSED: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in report.lines:
        print(line)
    return 1 if report.errors else 0


def _validate_sim2sim(args: argparse.Namespace) -> PolicyMeta:
    """Refuse bad input before any node starts: the domain id, robot.yaml and the artifact (InputError); returns the
    artifact's metadata."""
    from robot_rl.deploy.ros_env import check_domain_id
    from robot_rl.deploy.validate import RobotSpec, load_policy
    from sim.robots import load_robot

    check_domain_id(args.domain_id)
    return load_policy(Path(args.policy), robot=RobotSpec.from_robot(load_robot(args.robot).as_dict()))[0]


def _sim2sim(args: argparse.Namespace) -> int:
    meta = _validate_sim2sim(args)
    limit = {} if args.max_step_change is None else {"max_step_change": f"[{args.max_step_change}]"}
    if args.episodes:
        from robot_rl.deploy.node_report import describe

        realtime = plan_realtime(args.rt_priority, args.sim_rt_priority)
        print(realtime.note, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "policy_node_stats.json"
            try:
                results = run_episodes(Path(args.policy), args.robot, args.episodes, args.episode_s, args.latency_ms,
                                       args.noise, args.domain_id, args.seed, args.namespace, args.launch,
                                       policy_params=limit | {"stats_file": str(stats_file)},
                                       rt_priority=realtime.priority, rt_nodes=realtime.nodes)
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 1
            stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        success = sum(s for s, _ in results) / len(results)
        distances = sorted(d for _, d in results)
        median_cm = distances[len(distances) // 2] * 100
        print(f"sim2sim {args.robot}: {len(results)} episodes, success {success:.1%}, median final distance "
              f"{median_cm:.2f} cm (gripper to target or cube; latency {args.latency_ms:g} ms, noise "
              f"{args.noise:g} rad)")
        print(describe(stats, meta.control_hz))
        return 0
    from robot_rl.deploy.node_procs import NodeProcesses

    sim_params = _sim_params(args.latency_ms, args.noise, args.seed) | _vla_sim_params(Path(args.policy))
    nodes = NodeProcesses(args.launch, _launch_args(Path(args.policy), args.robot, args.namespace), args.domain_id,
                          extra={"sim_robot": sim_params, "policy_node": limit})
    if args.print_commands:
        for name, cmd in nodes.commands.items():
            print(f"# {name}\n{' '.join(cmd)}")
    try:
        while not nodes.exited():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    return max(nodes.stop().values(), default=0)


def _launch_args(policy: Path, robot: str, namespace: str) -> dict[str, str]:
    return {"robot": robot, "policy": str(policy.resolve()), "namespace": namespace}


def _sim_params(latency_ms: float, noise: float, seed: int) -> dict[str, object]:
    return {"command_latency_s": float(latency_ms) / 1e3, "position_noise": float(noise),
            "velocity_noise": 10.0 * float(noise), "seed": int(seed)}


def _vla_sim_params(policy: Path) -> dict[str, object]:
    """A VLA artifact's scene for the simulated robot: its task (language episodes, instructions) and the cameras it
    sees, rendered at its image size (square); ``{}`` for a vector artifact."""
    from robot_rl.deploy.artifact import load_meta

    meta = load_meta(policy)
    if meta.vla is None:
        return {}
    return {"task": meta.task, "cameras": ",".join(meta.vla.cameras), "image_size": meta.vla.height}


def run_episodes(policy: Path, robot: str, episodes: int, episode_s: float = 0.0, latency_ms: float = 0.0,
                 noise: float = 0.0, domain_id: int = 0, seed: int = 0, namespace: str = "",
                 launch: str = "sim2sim.launch.yaml", warmup: int = 1,
                 policy_params: dict[str, object] | None = None, rt_priority: int = 0,
                 rt_nodes: tuple[str, ...] | None = None) -> list[tuple[float, float]]:
    """Play episodes of the artifact's task (reach, lift, language reach or pick) over ROS 2; ``[(success, final
    distance m)]``.

    ``episode_s``: the longest episode (a lift episode ends at success); 0 is the task's own length. The final
    distance is the gripper's to the target (reach) or to the cube (lift).

    The first ``warmup`` episodes (they include the policy node's soft start) are not returned.
    ``policy_params`` override policy node parameters (e.g. ``{"max_step_change": "[1.0, ...]"}``).
    ``rt_priority > 0``: both nodes run in SCHED_FIFO at that priority from the end of the first
    episode (after start-up), as control processes on a robot computer; ``rt_nodes`` limits it to those
    nodes (e.g. ``("sim_robot",)``: the stand-in robot only, what ``robot-rl deploy sim2sim`` does by default,
    see :func:`robot_rl.deploy.node_procs.plan_realtime`).
    """
    from robot_rl.deploy.artifact import load_meta
    from robot_rl.deploy.node_procs import NodeProcesses

    if rt_priority and warmup < 1:
        raise ValueError("rt_priority needs warmup >= 1: real-time scheduling starts after the first episode")
    task = load_meta(policy).task
    if not task:
        raise RuntimeError(f"{policy}/policy.yaml has no task: episodes need the training task's targets")
    if not episode_s:
        import sim as sim_tasks

        episode_s = sim_tasks.make_env(task, num_envs=1).cfg.episode_s
    sim = _sim_params(latency_ms, noise, seed) | _vla_sim_params(policy) | {"task": task, "episode_s": episode_s}
    extra = {"sim_robot": sim, "policy_node": dict(policy_params or {})}
    nodes = NodeProcesses(launch, _launch_args(policy, robot, namespace), domain_id, extra=extra)
    os.environ.update({k: nodes.env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    import rclpy
    from std_msgs.msg import Float64MultiArray

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node("sim2sim_monitor", namespace=namespace or None, context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    results: list[tuple[float, float]] = []
    node.create_subscription(Float64MultiArray, "sim/episode", lambda m: results.append((m.data[1], m.data[2])), 10)
    deadline = time.monotonic() + 120 + (episodes + warmup) * episode_s * 3
    realtime = False
    try:
        while len(results) < episodes + warmup and time.monotonic() < deadline and not nodes.exited():
            executor.spin_once(timeout_sec=0.1)
            if rt_priority and results and not realtime:
                nodes.set_realtime(rt_priority, rt_nodes)
                realtime = True
    finally:
        codes = nodes.stop()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    if len(results) <= warmup:
        raise RuntimeError(f"only {len(results)} episodes finished; node exit codes {codes}")
    return results[warmup:]


def main(argv: list[str]) -> int:
    """Entry point of ``robot-rl deploy``."""
    parser = command_parser("deploy", SUMMARY, EPILOG)
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate an artifact for a robot: schema, joints, scales, inference")
    check.add_argument("policy", help="artifact directory (policy.yaml + policy.onnx)")
    check.add_argument("--robot", required=True,
                       help="robot name (hardware/<robot>/robot.yaml), e.g. so101, or a path to a robot.yaml")
    check.add_argument("--runs", type=positive, default=200, help="inference runs timed (default 200)")
    sim = sub.add_parser("sim2sim", help="simulated robot + policy node over ROS 2 (DDS on loopback)",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--robot", default="so101", help="robot name (default so101)")
    sim.add_argument("--policy", required=True, help="artifact directory")
    sim.add_argument("--namespace", default="", help="ROS namespace of both nodes")
    sim.add_argument("--domain-id", type=domain_id, default=os.environ.get("ROS_DOMAIN_ID", "0"),
                     help="ROS_DOMAIN_ID: 0..101 or 215..232 (default $ROS_DOMAIN_ID or 0)")
    sim.add_argument("--episodes", type=count, default=0,
                     help="play N episodes of the artifact's task, reach, lift, language reach or pick (after one "
                          "warm-up episode with the soft start), print the success rate and stop (0: run until "
                          "Ctrl-C)")
    sim.add_argument("--episode-s", type=duration, default=0.0,
                     help="episode length in seconds (a lift or pick episode ends earlier at success); default 0: the "
                          "task's own (so101_reach 4 s, so101_lift 8 s)")
    sim.add_argument("--latency-ms", type=number(0.0, 1000.0), default=0.0,
                     help="command latency of the simulated robot (ms)")
    sim.add_argument("--noise", type=number(0.0, 1.0), default=0.0, help="joint position noise std (rad); velocity 10x")
    sim.add_argument("--seed", type=seed, default=0, help="seed of the simulated robot")
    sim.add_argument("--max-step-change", type=number(0.0, 10.0, low_inclusive=False), default=None,
                     help="the policy node's rate limit in rad per control step instead of robot.yaml's "
                          "safety.max_step_change (to measure what the limit costs in sim; not for hardware)")
    sim.add_argument("--launch", default="sim2sim.launch.yaml", help="launch file (name in ros_nodes/launch or path)")
    sim.add_argument("--print-commands", action="store_true", help="print each node's command line (no --episodes)")
    sim.add_argument("--rt-priority", type=integer(0, 99), default=0,
                     help="with --episodes: run both nodes in SCHED_FIFO at this priority after the first episode "
                          "(needs root or rtprio rights; 0: see --sim-rt-priority)")
    sim.add_argument("--sim-rt-priority", type=integer(0, 99), default=DEFAULT_SIM_RT_PRIORITY,
                     help="with --episodes: the simulated robot node alone (a robot driver's stand-in) in SCHED_FIFO "
                          "at this priority after the first episode, where this user may (else it says so and runs "
                          "at normal scheduling); the policy node stays at normal scheduling (default "
                          f"{DEFAULT_SIM_RT_PRIORITY}; 0: normal scheduling for both)")
    args = parser.parse_args(argv)
    return _check(args) if args.action == "check" else _sim2sim(args)
