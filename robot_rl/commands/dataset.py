"""``robot-rl dataset info|stats|plot <dataset>``: inspect a LeRobot v3.0 dataset folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUMMARY = "Inspect a LeRobot v3.0 dataset: episode table, feature statistics, per-joint plots (PNG)."

EPILOG = """\
examples:
  robot-rl dataset info  outputs/demos/so101_reach          # checks the structure, prints episodes
  robot-rl dataset stats outputs/demos/so101_reach --key action
  robot-rl dataset stats outputs/demos/so101_reach --rewrite # rebuild meta/stats.json from episode stats
  robot-rl dataset plot  outputs/demos/so101_reach --episodes 0 1 --out outputs/plots

A dataset is a folder with meta/info.json, meta/episodes/, data/ (and videos/): what LeRobot writes
(`LeRobotDataset.root`, e.g. ~/.cache/huggingface/lerobot/<user>/<name>) and what `robot-rl record` writes.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robot-rl dataset",
        description=SUMMARY,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{info,stats,plot}")
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
    return parser


def main(argv: list[str]) -> int:
    """Run ``robot-rl dataset``."""
    args = _parser().parse_args(argv)
    from robot_rl.data.lerobot import DatasetFormatError, LeRobotDataset, meta, report
    from robot_rl.data.lerobot.stats import aggregate_dataset

    try:
        if args.action == "stats" and args.rewrite:
            rows = meta.load_episodes(args.dataset)
            meta.save_stats(args.dataset, aggregate_dataset([meta.episode_stats_from_row(r) for r in rows]))
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
