"""``robot-rl ros``: ROS 2 helpers (parameter files for the ros_nodes package)."""

from __future__ import annotations

import argparse
from pathlib import Path

from robot_rl.commands._args import command_parser

SUMMARY = "ROS 2 helpers: `robot-rl ros params <robot>` writes the ros_nodes parameter file"

EPILOG = """examples:
  robot-rl ros params so101                          # print the parameter file
  robot-rl ros params so101 --out /tmp/so101.yaml    # write it (atomically)
  robot-rl ros params --all --out-dir ros_nodes/config   # regenerate the packaged files

The file has /**/policy_node, /**/sim_robot, /**/demo_recorder and /**/demo_replay sections (any
namespace); pass it to a node with
`--ros-args --params-file FILE`, or let the launch files find share/ros_nodes/config/<robot>.yaml."""


def main(argv: list[str]) -> int:
    """Entry point of ``robot-rl ros``."""
    parser = command_parser("ros", SUMMARY, EPILOG)
    sub = parser.add_subparsers(dest="action", required=True)
    params = sub.add_parser("params", help="write ros_nodes parameters generated from hardware/<robot>/robot.yaml",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    params.add_argument("robot", nargs="?", help="robot name (hardware/<robot>/robot.yaml), e.g. so101")
    params.add_argument("--all", action="store_true", help="every robot under hardware/ (needs --out-dir)")
    params.add_argument("--policy", help="bake this artifact directory into the policy_node section")
    params.add_argument("--out", type=Path, help="output file (default: stdout)")
    params.add_argument("--out-dir", type=Path, help="write <out-dir>/<robot>.yaml")
    args = parser.parse_args(argv)

    from robot_rl.deploy.artifact import write_atomic
    from robot_rl.deploy.ros_params import ros_params_yaml
    from sim.robots import hardware_dir, load_robot

    if args.all == bool(args.robot):
        parser.error("give one robot name or --all")
    if args.all and not args.out_dir:
        parser.error("--all needs --out-dir")
    names = sorted(p.parent.name for p in hardware_dir().glob("*/robot.yaml")) if args.all else [args.robot]
    for name in names:
        text = ros_params_yaml(load_robot(name).as_dict(), args.policy)
        target = args.out_dir / f"{name}.yaml" if args.out_dir else args.out
        if target is None:
            print(text, end="")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text.encode())
        print(f"wrote {target}")
    return 0
