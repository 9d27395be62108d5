"""``robot-rl vla-lerobot-export``: a user's local LeRobot policy directory (SmolVLA) as our VLA artifact.

Runs in the venv of ``bash .ci/setup_lerobot`` (LeRobot 0.6.1); the artifact it writes runs anywhere our VLA
artifacts do (``VLARuntime``, the ROS 2 policy node, ``robot-rl deploy sim2sim``) without torch or LeRobot.
docs/vla.md, "LeRobot policies"; :mod:`robot_rl.export_lerobot`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from robot_rl.commands._args import command_parser
from robot_rl.commands.vla_lerobot_eval import ACTION_NOTE, add_policy_args
from robot_rl.deploy.actions import robot_action_spec

SUMMARY = "Export a local LeRobot policy directory (SmolVLA) as a VLA artifact the ROS 2 policy node runs"


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        "vla-lerobot-export",
        "Load a LeRobot policy directory offline and write a VLA artifact: policy.onnx (pre-processing, the flow "
        "unrolled with the noise as input, post-processing and the robot's action map inside), tokenizer.json (its "
        "own tokenizer), policy.yaml, manifest.json. The graph is checked against torch before a file is written.",
        "example:\n  robot-rl vla-lerobot-export outputs/smolvla_reach --robot so101 --out outputs/smolvla_reach_onnx\n"
        "  robot-rl deploy sim2sim --policy outputs/smolvla_reach_onnx\n\n" + ACTION_NOTE,
    )
    add_policy_args(p)
    p.add_argument("--robot", default="so101", help="robot of hardware/<robot>/robot.yaml (default so101)")
    p.add_argument("--task", default="so101_reach_lang",
                   help="language task whose instructions the policy was trained on (default so101_reach_lang)")
    p.add_argument("--resize", choices=("none", "nearest"), default="none",
                   help="images of another size than the policy's: refused (none) or resampled (nearest)")
    p.add_argument("--out", type=Path, required=True, help="artifact directory to write")
    return p


def main(argv: list[str]) -> int:
    """Parse ``argv``, load the policy, export; 2 on bad input."""
    args = _parser().parse_args(argv)
    import sim
    from robot_rl.errors import InputError
    from robot_rl.export_lerobot import export_lerobot_policy, make_lerobot_meta
    from robot_rl.models.vla.lerobot_policy import LeRobotPolicy, check_policy_dir

    check_policy_dir(args.policy)  # before building an env: a bad directory is refused at once
    probe = sim.make_env(args.task, 1)
    try:
        if not probe.has_instructions:
            raise InputError("has no instructions", key="--task", value=args.task,
                             fix="use a language task (so101_reach_lang, so101_pick_lang)")
        robot = probe.robot
        if robot.name != args.robot:
            raise InputError(f"task {args.task} is played by {robot.name}", key="--robot", value=args.robot,
                             fix=f"pass --robot {robot.name}, or a task of {args.robot}")
        instructions = list(probe.instruction_set.table())
    finally:
        probe.close()
    action = robot_action_spec(robot)
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # LeRobot prints while loading
        policy = LeRobotPolicy.load(args.policy)
    meta = make_lerobot_meta(policy, robot.name, robot.joint_names, [j.default for j in robot.joints], action,
                             robot.control.policy_hz, instructions, resize=args.resize, task=args.task)
    out = export_lerobot_policy(policy, meta, args.out, targets=args.action == "joint")
    print(f"exported {args.policy} ({policy.policy.config.type}, chunk {policy.chunk_len}, "
          f"{meta.vla.flow_steps} flow steps, cameras {list(policy.cameras)} {meta.vla.height}x{meta.vla.width}) "
          f"to {out} in {time.perf_counter() - start:.0f} s")
    return 0
