"""``robot-rl dataset info|stats|plot <dataset>``: inspect a LeRobot v3.0 dataset folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robot_rl.commands._args import command_parser

SUMMARY = (
    "Inspect a LeRobot v3.0 dataset (episode table, feature statistics, per-joint plots) or convert rosbag2 "
    "recordings into one."
)

EPILOG = """\
examples:
  robot-rl dataset info  outputs/demos/so101_reach          # checks the structure, prints episodes
  robot-rl dataset stats outputs/demos/so101_reach --key action
  robot-rl dataset stats outputs/demos/so101_reach --rewrite # rebuild meta/stats.json from episode stats
  robot-rl dataset plot  outputs/demos/so101_reach --episodes 0 1 --out outputs/plots
  robot-rl dataset from-bag rosbag2_2026_11_30 --robot so101 --fps 30 --out outputs/demos/from_bag

A dataset is a folder with meta/info.json, meta/episodes/, data/ (and videos/): what LeRobot writes
(`LeRobotDataset.root`, e.g. ~/.cache/huggingface/lerobot/<user>/<name>) and what `robot-rl record` writes.
"""


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "dataset",
        SUMMARY,
        EPILOG,
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{info,stats,plot,from-bag}")
    info = sub.add_parser("info", help="totals, features, tasks, episode table; runs the structural checks")
    info.add_argument("dataset", type=Path, help="dataset folder (holds meta/info.json)")
    info.add_argument("--max-episodes", type=int, default=20, help="episode rows to print (default 20)")
    stats = sub.add_parser("stats", help="per-dimension statistics from meta/stats.json")
    stats.add_argument("dataset", type=Path, help="dataset folder (holds meta/info.json)")
    stats.add_argument("--key", action="append", help="feature to show (repeatable; default: all)")
    stats.add_argument(
        "--rewrite", action="store_true", help="recompute meta/stats.json from the per-episode stats, atomically"
    )
    plot = sub.add_parser("plot", help="one PNG per numeric feature: a subplot per joint, a line per episode")
    plot.add_argument("dataset", type=Path, help="dataset folder (holds meta/info.json)")
    plot.add_argument("--key", action="append", help="feature to plot (repeatable; default: all numeric)")
    plot.add_argument("--episodes", type=int, nargs="+", help="episodes to overlay (default: the first 10)")
    plot.add_argument("--out", type=Path, help="output folder (default: outputs/dataset_plots/<dataset name>)")
    bag = sub.add_parser(
        "from-bag",
        help="rosbag2 (MCAP or sqlite3) JointState + command topics -> a new dataset",
        description="Align the robot's JointState and position-command topics on the --fps grid (latest state at "
        "each frame, latest command by the next frame; bag receive times) and write one episode per span "
        "without a pause longer than --gap-s in either topic (or one per bag with --split bag). Topic names "
        "default to hardware/<robot>/robot.yaml's ros section.",
    )
    bag.add_argument("bags", type=Path, nargs="+", help="rosbag2 folders (metadata.yaml) or .mcap/.db3 files")
    bag.add_argument("--robot", required=True, help="hardware/<robot>/robot.yaml name, e.g. so101")
    bag.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    bag.add_argument("--fps", type=int, default=30, help="frame rate of the dataset (default 30)")
    bag.add_argument("--split", choices=("gap", "bag"), default="gap", help="episode boundaries (default gap)")
    bag.add_argument("--gap-s", type=float, default=0.5, help="a pause this long ends an episode (default 0.5)")
    bag.add_argument("--min-frames", type=int, default=2, help="drop shorter episodes (default 2)")
    bag.add_argument("--task", default="teleoperation", help="task text stored with every frame")
    bag.add_argument("--joint-states-topic", help="default: robot.yaml ros.joint_states.topic")
    bag.add_argument("--command-topic", help="default: robot.yaml ros.command.topic")
    bag.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    return parser


def _from_bag(args: argparse.Namespace) -> int:
    from robot_rl.data.rosbag import bag_to_dataset
    from sim.robots import load_robot

    try:
        summary = bag_to_dataset(args.bags, load_robot(args.robot).as_dict(), args.out, args.fps, args.task,
                                 args.split, args.gap_s, args.min_frames, args.joint_states_topic,
                                 args.command_topic, args.overwrite)
    except (ValueError, FileExistsError, FileNotFoundError) as err:
        print(f"robot-rl dataset from-bag: {err}", file=sys.stderr)
        return 2
    print(summary)
    return 0


def main(argv: list[str]) -> int:
    """Run ``robot-rl dataset``."""
    args = _parser().parse_args(argv)
    if args.action == "from-bag":
        return _from_bag(args)
    from robot_rl.data.lerobot import DatasetFormatError, LeRobotDataset, meta, report
    from robot_rl.data.lerobot.stats import aggregate_dataset

    try:
        if args.action == "stats" and args.rewrite:
            features = meta.load_info(args.dataset).features
            rows = meta.load_episodes(args.dataset)
            meta.save_stats(args.dataset, aggregate_dataset([meta.episode_stats_from_row(r, features) for r in rows]))
            print(f"rewrote {args.dataset / meta.STATS_PATH} from {len(rows)} episodes' statistics")
        ds = LeRobotDataset(args.dataset)
        if args.action == "info":
            print(report.describe(ds, args.max_episodes))
        elif args.action == "stats":
            print(report.stats_report(ds, args.key))
        else:
            out = args.out or Path("outputs") / "dataset_plots" / args.dataset.resolve().name
            for path in report.plot_features(ds, out, args.key, args.episodes):
                print(f"wrote {path}")
    except (DatasetFormatError, KeyError, IndexError) as err:
        print(f"robot-rl dataset: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    return 0
