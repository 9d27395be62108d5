"""``robot-rl record``: record demonstrations in sim to a LeRobot v3.0 dataset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands._args import count, domain_id, duration, image_size, integer, positive, rate, seed

SUMMARY = (
    "Record demonstrations to a LeRobot v3.0 dataset: in sim (scripted expert, exported policy, keyboard "
    "teleop) or from a robot's ROS 2 topics."
)

EPILOG = """\
examples:
  robot-rl record --task so101_reach --episodes 20 --out outputs/demos/so101_reach
  robot-rl record --task so101_lift --episodes 50 --num-envs 16 --only-success --out outputs/demos/lift
  robot-rl record --task so101_reach --episodes 2 --camera 96x96 --out outputs/demos/reach_cam
  robot-rl record --task so101_reach --policy outputs/export/so101_reach --episodes 10 --out outputs/demos/ppo

Scripted experts exist for so101_reach(_deploy), so101_lift(_shaped), so101_reach_lang and so101_pick_lang.
The language tasks store each episode's instruction as its task string; their cameras record with
--override 'cameras=["front","wrist"]' --override image_size=64 (observation.images.<camera>), or the
front one alone with --camera 64x64:
  robot-rl record --task so101_pick_lang --episodes 20 --camera 64x64 --out outputs/demos/pick_lang
Each finished episode is
committed to disk before the next one starts: stopping the recorder keeps every saved episode. After a crash
or kill, run the same command with --resume: it keeps every complete episode and records the rest.
Rendering a camera is slow on CPU (OSMesa, ~0.2-0.4 s per frame); keep --num-envs 1 with --camera.
Inspect the result with `robot-rl dataset info <out>`, replay it with `robot-rl replay <out>`.

From ROS 2 (--source ros): the recorder node subscribes the robot's JointState and command topics
(names and message types from hardware/<robot>/robot.yaml), samples both at --fps and saves an
episode after --episode-s, when either stream pauses longer than --max-gap-s, or on its services
(`ros2 service call /demo_recorder/stop std_srvs/srv/Trigger`; also start, discard). Ctrl-C saves
the episode in progress; a crash keeps every episode saved before.
  robot-rl record --source ros --robot so101 --fps 30 --instruction "stack the cubes" --out outputs/demos/ros
  robot-rl record --source ros --robot so101 --episode-s 20 --episodes 5 --out outputs/demos/ros5
  robot-rl record --source ros --robot so101 --teleop --sim --episodes 0 --out outputs/demos/kb_ros
With --teleop the keyboard of this terminal moves the robot's joints (keys as for --source teleop; space
ends the episode and starts the next) through the policy node's safety layer while the recorder records.

Keyboard teleop in sim (--source teleop, needs an interactive terminal): the sim runs in real time;
joint mode: q w e r t y raise joints 1-6, a s d f g h lower them; ee mode: arrows move the gripper
in x/y, w/s in z, q/a open/close the gripper; [ ] halve/double the step; esc stops (saved episodes stay).
Episodes end at the task's time limit (--override episode_s=20 for longer ones).
  robot-rl record --source teleop --task so101_reach --teleop-mode ee --override episode_s=20 --out outputs/demos/kb
"""


INSTRUCTIONS = {
    "so101_reach": "reach the target",
    "so101_lift": "pick up the cube",
    "so101_lift_shaped": "pick up the cube",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robot-rl record", description=SUMMARY, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", choices=("sim", "teleop", "ros"), default="sim",
                        help="sim (default): expert/policy in sim; teleop: keyboard in sim; ros: a robot's topics")
    parser.add_argument("--teleop-mode", choices=("joint", "ee"), default="joint",
                        help="teleop keys move joints (default) or the end effector (arms)")
    parser.add_argument("--task", help="sim task, e.g. so101_reach (see `robot-rl sim --help`); needed for sim")
    parser.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    parser.add_argument("--episodes", type=count, default=10, help="episodes to save (default 10)")
    parser.add_argument("--policy", type=Path, help="exported policy artifact dir (default: the scripted expert)")
    parser.add_argument("--num-envs", type=positive, default=4, help="parallel envs (default 4)")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--camera", type=image_size,
                        help="render a front camera of HEIGHTxWIDTH (even sizes); a language task records its own "
                             "front camera (square: --camera 64x64 = --override 'cameras=[\"front\"]' "
                             "--override image_size=64)")
    parser.add_argument("--only-success", action="store_true", help="save only episodes that succeed")
    parser.add_argument("--instruction", help="task text stored per frame (default: from the task name; language "
                                              "tasks store each episode's own instruction)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="task config override, e.g. episode_s=2.0 (repeatable)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    ros = parser.add_argument_group("from ROS 2 (--source ros); --episodes 0 records until Ctrl-C")
    ros.add_argument("--robot", help="hardware/<robot>/robot.yaml name, e.g. so101")
    ros.add_argument("--fps", type=integer(1, 1000), default=30, help="dataset frame rate (default 30)")
    ros.add_argument("--episode-s", type=duration, default=0.0, help="episode length in s (default 0: until a pause)")
    ros.add_argument("--max-gap-s", type=rate, default=0.5,
                     help="a pause this long ends the episode (default 0.5)")
    ros.add_argument("--manual", action="store_true", help="start each episode with the ~/start service")
    parser.add_argument("--resume", action="store_true",
                        help="continue the dataset at --out (e.g. after a crash or kill: a half-written episode is "
                             "dropped, every complete one kept); sim and teleop record until it holds --episodes, "
                             "ros appends --episodes more")
    ros.add_argument("--no-velocity", action="store_true", help="the JointState carries no velocities")
    ros.add_argument("--teleop", action="store_true", help="drive the robot from this terminal's keyboard (joints)")
    ros.add_argument("--sim", action="store_true", help="also start the MuJoCo simulated robot node")
    ros.add_argument("--domain-id", type=domain_id, help="ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID or 0)")
    ros.add_argument("--namespace", default="", help="namespace of the recorder and the robot's topics")
    ros.add_argument("--log-dir", type=Path, help="node log folder (default: a temporary folder)")
    ros.add_argument("--print-commands", action="store_true", help="print the node command line")
    return parser


def _overrides(items: list[str]) -> dict:
    """``KEY=JSON`` items as a dict (plain strings when not JSON); ValueError for an item without '='."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override {item!r}: use KEY=VALUE, e.g. episode_s=2.0")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def _teleop(args: argparse.Namespace) -> int:
    """Keyboard teleop in sim, recorded episode by episode until --episodes or esc."""
    import torch

    from robot_rl.demos.recorder import record
    from robot_rl.demos.teleop import NoKeyboardError, TeleopQuit, TerminalKeys, teleop_policy

    torch.set_num_threads(1)
    try:
        keys = TerminalKeys()
    except NoKeyboardError as err:
        print(f"robot-rl record: {err}", file=sys.stderr)
        return 2
    text = args.instruction or INSTRUCTIONS.get(args.task)
    try:
        with keys:
            print(f"teleop ({args.teleop_mode} mode) on {args.task}: esc stops, Ctrl-C too; see --help for the keys",
                  flush=True)
            policy = teleop_policy(keys, args.teleop_mode, status=lambda line: print("\r" + line, end="", flush=True))
            summary = record(args.task, policy, args.out, args.episodes, text, num_envs=1, seed=args.seed,
                             camera=args.camera, source=f"teleop:keyboard:{args.teleop_mode}",
                             overwrite=args.overwrite, overrides=_overrides(args.override), resume=args.resume)
    except (TeleopQuit, KeyboardInterrupt):
        print(f"\nstopped; every episode finished before is saved in {args.out}")
        return 0
    except (KeyError, ValueError, FileExistsError, RuntimeError) as err:
        print(f"\nrobot-rl record: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    print(f"\n{summary}")
    return 0


def main(argv: list[str]) -> int:
    """Run ``robot-rl record``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.source == "ros":
        from robot_rl.demos.ros_launch import record_over_ros

        return record_over_ros(args)
    if args.task is None:
        parser.error("--task is required to record in sim (e.g. --task so101_reach)")
    if args.source == "teleop":
        return _teleop(args)
    import torch

    from robot_rl.demos.recorder import expert_policy, observation_policy, record

    # The envs step a handful of robots: tiny tensors, where torch's intra-op thread pool only
    # costs (a batched 3x3 solve takes 17 ms with 2 threads on a busy machine, 0.06 ms with 1).
    torch.set_num_threads(1)

    try:
        overrides = _overrides(args.override)
    except ValueError as err:
        print(f"robot-rl record: {err}", file=sys.stderr)
        return 2
    try:
        if args.policy is None:
            policy, source = expert_policy, f"expert:{args.task}"
        else:
            import sim
            from robot_rl.deploy.policies import artifact_policy

            probe = sim.make_env(args.task, num_envs=1, **overrides)
            run = artifact_policy(args.policy, probe.robot.joint_names, probe.observation_dims["policy"])
            policy, source = observation_policy(run), f"policy:{args.policy}"
            probe.close()
        text = args.instruction or INSTRUCTIONS.get(args.task)
        summary = record(
            args.task,
            policy,
            args.out,
            args.episodes,
            text,
            num_envs=args.num_envs,
            seed=args.seed,
            camera=args.camera,
            only_success=args.only_success,
            source=source,
            overwrite=args.overwrite,
            overrides=overrides,
            resume=args.resume,
        )
    except (KeyError, ValueError, FileExistsError, RuntimeError) as err:
        print(f"robot-rl record: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    print(summary)
    return 0
