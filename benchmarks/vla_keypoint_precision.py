"""How precisely does the FiLM keypoint find the named target? ``efficientnet_lite0_film`` head variants on reach_lang.

A ``so101_reach_lang`` success needs the gripper within 2 cm of the named sphere; at 64x64 one pixel of the front
camera is about 0.7 cm there, so the keypoint that tells the policy where the sphere is must be right to about a
pixel. This benchmark isolates that: the :class:`InstructedKeypointEncoder` head (and the instruction's mean token
embedding) is trained with :func:`keypoint_loss` alone, the loss of ``agent.target_keypoint``, on every frame of the
first episodes of a recording, its target the named sphere's image position per world camera (``sim.target``
projected by ``env.image_position``), and scored on every frame of the held-out episodes: the median and 90th
percentile pixel error per camera (at the recording's resolution), beside always guessing the frame's centre.

Arms (``--arms``, :data:`ARMS`): the frozen feature stride (4: three EfficientNet-Lite0 blocks, 24 channels; 2: one,
16 channels) times the head's first convolution (1x1 per pixel, or 3x3). Each trains for ``--minutes`` of wall time
(one torch thread, AdamW 3e-3, batch 64, the frozen features cached first as ``agent=vla`` does). Rows go to
``docs/results/vla/keypoint_precision.json``.

    python benchmarks/vla_keypoint_precision.py --dataset outputs/vla_data/reach_lang_100 --minutes 3
"""

from __future__ import annotations

import copy
import sys
import time

import torch
from _held_out_arms import CAMERAS, WIDTH, arms_parser, split_episodes
from _results import RESULTS, write_rows
from torch import nn

import sim
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.vla_batches import VLABatches
from robot_rl.models.vla import InstructionTokenizer
from robot_rl.models.vla.encoders import InstructedKeypointEncoder
from robot_rl.models.vla.model import keypoint_loss
from sim.tasks.so101_reach_lang import INSTRUCTIONS

ARMS = {"stride4_1x1": (4, 1), "stride4_3x3": (4, 3), "stride2_1x1": (2, 1), "stride2_3x3": (2, 3)}
"""Arm -> (frozen feature stride, the head's first kernel); ``stride4_1x1`` is the default of ``agent=vla``."""


def run(arm: str, images: VLABatches, vocab_size: int, train: torch.Tensor, test: torch.Tensor, minutes: float,
        seed: int) -> dict:
    """Train one head on frames ``train`` of the decoded dataset ``images`` and score it on frames ``test``."""
    stride, kernel = ARMS[arm]
    torch.manual_seed(seed)
    size = images.images[CAMERAS[0]].shape[-1]
    encoder = InstructedKeypointEncoder(WIDTH, keypoints=1, stride=stride, kernel=kernel)
    batches = copy.copy(images)  # caching replaces the copy's images with this stride's features, not the original's
    start = time.monotonic()
    batches.cache_features(encoder.features)
    cache_s = time.monotonic() - start
    words = nn.Embedding(vocab_size, WIDTH, padding_idx=0)
    params = [p for p in encoder.parameters() if p.requires_grad] + list(words.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=1e-4)
    g = torch.Generator().manual_seed(seed)

    def points(batch: dict) -> torch.Tensor:  # [B, C, 2]
        keep = batch["token_mask"].unsqueeze(-1).float()
        text = (words(batch["tokens"]) * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        return torch.stack([encoder.points(batch["image_features"][c], text)[:, 0] for c in CAMERAS], dim=1)

    start, steps = time.monotonic(), 0
    while steps == 0 or time.monotonic() - start < minutes * 60:  # at least one step
        batch = batches.batch(train[torch.randint(0, len(train), (64,), generator=g)])
        loss = keypoint_loss(points(batch), batch["target"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    with torch.no_grad():
        batch = batches.batch(test)
        error = (points(batch) - batch["target"]).norm(dim=-1) * size / 2  # [n, C] pixels
        centre = batch["target"].norm(dim=-1) * size / 2
    row = {"arm": arm, "stride": stride, "kernel": kernel, "steps": steps,
           "train_s": round(time.monotonic() - start, 1), "feature_cache_s": round(cache_s, 1), "image_size": size,
           "held_out_frames": len(test), "trainable_parameters": sum(p.numel() for p in params)}
    for i, cam in enumerate(CAMERAS):
        row[cam] = {"median_px": round(error[:, i].median().item(), 2),
                    "p90_px": round(error[:, i].quantile(0.9).item(), 2),
                    "centre_median_px": round(centre[:, i].median().item(), 2)}
    return row


def main(argv: list[str]) -> None:
    p = arms_parser(__doc__.split("\n\n")[0], ARMS, 3.0, RESULTS / "vla" / "keypoint_precision.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = InstructionTokenizer.train(list(INSTRUCTIONS.table()))
    env = sim.make_env("so101_reach_lang", num_envs=1, seed=0, nthread=1)
    images = VLABatches(args.dataset, tokenizer, 1, 16, CAMERAS, target_key="sim.target",  # decoded once
                        target_map=lambda target, state: torch.stack([env.image_position(target, c)
                                                                      for c in CAMERAS], dim=1))  # [N, C, 2]
    train, test, _ = split_episodes(LeRobotDataset(args.dataset), args.holdout)
    rows = []
    for arm in args.arms:
        rows.append(run(arm, images, tokenizer.vocab_size, train, test, args.minutes, args.seed))
        print(rows[-1], flush=True)
    out = write_rows(args.out, rows, ["benchmarks/vla_keypoint_precision.py", *argv], dataset=str(args.dataset),
                     holdout_episodes=args.holdout)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
