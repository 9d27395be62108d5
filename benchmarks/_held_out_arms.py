"""What ``vla_target_probe.py`` and ``vla_keypoint_precision.py`` share: arms trained on the first episodes of a
``so101_reach_lang`` recording with the front and top cameras and scored on its last ``--holdout`` episodes."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from robot_rl.data.lerobot import LeRobotDataset

WIDTH = 64
"""Token width of every arm."""
CAMERAS = ("front", "top")


def arms_parser(description: str, arms: dict, minutes: float, out: Path, arms_help: str | None = None
                ) -> argparse.ArgumentParser:
    """``--dataset --holdout --minutes --arms --seed --out``, with this benchmark's arms and defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dataset", type=Path, required=True,
                   help="a so101_reach_lang recording with the front and top cameras (benchmarks/vla_sft.py makes one)")
    p.add_argument("--holdout", type=int, default=20, help="last episodes held out for the score")
    p.add_argument("--minutes", type=float, default=minutes, help="training wall time per arm")
    p.add_argument("--arms", nargs="*", default=list(arms), choices=list(arms), help=arms_help)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=out)
    return p


def split_episodes(ds: LeRobotDataset, holdout: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Frame rows ``[n]`` of the first ``ds.num_episodes - holdout`` episodes (training), those ``[m]`` of the last
    ``holdout`` (held out), and the number of training episodes."""
    episode = torch.tensor(ds.column("episode_index"), dtype=torch.long).flatten()
    split = ds.num_episodes - holdout
    return torch.nonzero(episode < split).flatten(), torch.nonzero(episode >= split).flatten(), split
