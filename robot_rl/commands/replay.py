"""``robot-rl replay <dataset> --episode N``: open-loop replay of a recorded episode in sim."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUMMARY = "Replay a recorded episode open-loop in sim: per-joint tracking error, success, side-by-side video."

EPILOG = """\
examples:
  robot-rl replay outputs/demos/so101_reach --episode 3
  robot-rl replay outputs/demos/so101_reach --episode 0 --video outputs/replay_ep0.mp4 --video-size 128x128

The env is rebuilt from meta/robot_rl.json (written by `robot-rl record`) or --task, restored to the
episode's recorded first state, and stepped with the recorded actions. The video shows the recording
(its camera, or the recorded states re-rendered) on the left and the replay on the right.
Replay on a real robot goes through ROS 2 (the replay node, not part of this command).
"""


def _size(text: str) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"video size {text!r}: use HEIGHTxWIDTH, e.g. 128x128") from err
    return height, width


def main(argv: list[str]) -> int:
    """Run ``robot-rl replay``."""
    parser = argparse.ArgumentParser(
        prog="robot-rl replay", description=SUMMARY, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path, help="dataset folder (holds meta/info.json)")
    parser.add_argument("--episode", type=int, default=0, help="episode index (default 0)")
    parser.add_argument("--task", help="sim task (default: from meta/robot_rl.json)")
    parser.add_argument("--video", type=Path, help="write a side-by-side mp4 (recorded | replayed) here")
    parser.add_argument("--video-size", type=_size, default=(128, 128), help="HEIGHTxWIDTH of each panel")
    parser.add_argument(
        "--max-error", type=float, help="exit with status 1 if any joint's max tracking error exceeds this (rad)"
    )
    args = parser.parse_args(argv)
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
