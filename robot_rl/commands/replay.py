"""``robot-rl replay <dataset> --episode N``: open-loop replay of a recorded episode in sim."""

from __future__ import annotations

import sys
from pathlib import Path

from robot_rl.commands._args import command_parser, domain_id, image_size, integer

SUMMARY = (
    "Replay a recorded episode open-loop in sim (tracking error, success, side-by-side video) or on a robot "
    "over ROS 2 (--ros)."
)

EPILOG = """\
examples:
  robot-rl replay outputs/demos/so101_reach --episode 3
  robot-rl replay outputs/demos/so101_reach --episode 0 --video outputs/replay_ep0.mp4 --video-size 128x128

The env is rebuilt from meta/robot_rl.json (written by `robot-rl record`) or --task, restored to the
episode's recorded first state, and stepped with the recorded actions. The video shows the recording
(its camera, or the recorded states re-rendered) on the left and the replay on the right.

With --ros the replay node publishes the episode's recorded commands at the recorded rate to the robot
of --robot (topics and safety limits from hardware/<robot>/robot.yaml) through the policy node's safety
layer: nothing before the first JointState, soft start from the measured pose to the first recorded
command, joint limits, max step per tick, stale-state hold, e-stop (topic `estop`). --sim also starts
the MuJoCo simulated robot node (sim-to-sim). It prints the per-joint tracking error at the end:
  robot-rl replay outputs/demos/ros_teleop --episode 0 --ros --robot so101            # the real robot
  robot-rl replay outputs/demos/ros_teleop --episode 0 --ros --robot so101 --sim      # sim-to-sim
"""


def main(argv: list[str]) -> int:
    """Run ``robot-rl replay``."""
    parser = command_parser("replay", SUMMARY, EPILOG)
    parser.add_argument("dataset", type=Path, help="dataset folder (holds meta/info.json)")
    parser.add_argument("--episode", type=integer(minimum=0), default=0, help="episode index (default 0)")
    parser.add_argument("--task", help="sim task (default: from meta/robot_rl.json)")
    parser.add_argument("--video", type=Path, help="write a side-by-side mp4 (recorded | replayed) here")
    parser.add_argument("--video-size", type=image_size, default=(128, 128), help="HEIGHTxWIDTH of each panel")
    parser.add_argument(
        "--max-error", type=float, help="exit with status 1 if any joint's max tracking error exceeds this (rad)"
    )
    ros = parser.add_argument_group("replay on a robot over ROS 2 (--ros)")
    ros.add_argument("--ros", action="store_true", help="publish the recorded commands to a robot via the replay node")
    ros.add_argument("--robot", help="hardware/<robot>/robot.yaml name (default: the dataset's robot_type)")
    ros.add_argument("--sim", action="store_true", help="also start the MuJoCo simulated robot node (sim-to-sim)")
    ros.add_argument("--domain-id", type=domain_id, help="ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID or 0)")
    ros.add_argument("--namespace", default="", help="namespace of the nodes and their topics")
    ros.add_argument("--report", type=Path, help="write the tracking report here (JSON)")
    ros.add_argument("--log-dir", type=Path, help="node logs (default: a temporary folder)")
    ros.add_argument("--print-commands", action="store_true", help="print the node command lines")
    args = parser.parse_args(argv)
    if args.ros:
        from robot_rl.demos.ros_launch import replay_over_ros

        return replay_over_ros(args)
    import torch

    from robot_rl.data.lerobot import DatasetFormatError
    from robot_rl.demos.replay import replay

    # The envs step a handful of robots: tiny tensors, where torch's intra-op thread pool only
    # costs (a batched 3x3 solve takes 17 ms with 2 threads on a busy machine, 0.06 ms with 1).
    torch.set_num_threads(1)

    try:
        report = replay(args.dataset, args.episode, args.task, args.video, args.video_size)
    except (DatasetFormatError, KeyError, IndexError, ValueError) as err:
        print(f"robot-rl replay: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    print(report.table())
    if args.video:
        print(f"wrote {args.video}")
    if args.max_error is not None and float(report.max_abs.max()) > args.max_error:
        print(f"tracking error {report.max_abs.max():.3e} rad exceeds --max-error {args.max_error}", file=sys.stderr)
        return 1
    return 0
