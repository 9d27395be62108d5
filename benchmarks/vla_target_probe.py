"""Where is the named target? The VLA image encoders on the one question a ``so101_reach_lang`` policy must answer.

A reach_lang policy sees two 64x64 cameras and an instruction; to succeed it must find the named sphere to within
2 cm. This probe isolates that: each image encoder of :mod:`robot_rl.models.vla.encoders` (with the instruction's
mean token embedding) is trained to regress the named target's position (the dataset's ``sim.target``) from the
cameras of every frame of the first episodes of a recorded dataset, and is scored on the *first frame* of the
held-out episodes (the arm at its start pose, where a policy must decide where to go): the median error and the
share within the task's 2 cm, beside the same figures on the training episodes (memorised vs learned).

Arms (``--arms``, :data:`ARMS`): ``conv`` (from scratch, as ``VLAConfig.cpu``: convs 16-32-64, a 4x4 grid and 16
spatial-softmax keypoints), ``efficientnet_lite0`` (frozen ImageNet, its 2x2 final map at 64 px, a trained
projection) and ``efficientnet_lite0_film`` (:class:`InstructedKeypointEncoder`: the frozen early stage read by an
instruction-modulated keypoint head, features cached once as training does), each read by an MLP over the image
tokens and the instruction; and ``efficientnet_lite0_film_linear``, one FiLM keypoint per camera read by a linear map
alone. Each trains for ``--minutes`` of wall time (one torch thread, AdamW 1e-3, batch 64). Chance: the training
targets' mean as the guess. Rows go to ``docs/results/vla/target_probe.json``.

    python benchmarks/vla_target_probe.py --dataset outputs/vla_data/reach_lang_100 --minutes 4
"""

from __future__ import annotations

import copy
import sys
import time

import torch
from _held_out_arms import CAMERAS, WIDTH, arms_parser, split_episodes
from _results import RESULTS, write_rows
from torch import nn

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.vla_batches import VLABatches
from robot_rl.models.vla import InstructionTokenizer
from robot_rl.models.vla.encoders import ConvImageEncoder, EfficientNetLite0Encoder, InstructedKeypointEncoder
from sim.tasks.so101_reach_lang import INSTRUCTIONS

SUCCESS_M = 0.02
"""so101_reach_lang's success radius."""


ARMS = {
    "conv": ("conv", "mlp"),
    "efficientnet_lite0": ("efficientnet_lite0", "mlp"),
    "efficientnet_lite0_film": ("efficientnet_lite0_film", "mlp"),
    "efficientnet_lite0_film_linear": ("efficientnet_lite0_film", "linear"),
}
"""Arm -> (image encoder, readout). ``mlp``: the image tokens and the instruction's mean token, flattened, through a
256-unit MLP (capacity to spare, as the VLA's transformer has); ``linear``: one keypoint per camera and a linear map
of its tokens, nothing else (the instruction reaches the answer only through FiLM: find the named sphere or fail)."""


class TargetProbe(nn.Module):
    """Cameras ``{name: [B, 3, H, W]}`` (or cached features) + instruction tokens -> target position ``[B, 3]``."""

    def __init__(self, arm: str, vocab_size: int) -> None:
        super().__init__()
        self.kind, self.readout = ARMS[arm]
        self.words = nn.Embedding(vocab_size, WIDTH, padding_idx=0)
        if self.kind == "conv":
            self.encoder: nn.Module = ConvImageEncoder(WIDTH, (16, 32, 64), grid=4, keypoints=16)
            tokens = 16 + 16
        elif self.kind == "efficientnet_lite0":
            self.encoder = EfficientNetLite0Encoder(WIDTH, grid=2)
            tokens = 4
        else:
            tokens = 4 if self.readout == "mlp" else 1
            self.encoder = InstructedKeypointEncoder(WIDTH, keypoints=tokens)
        self.camera_embed = nn.Parameter(torch.zeros(len(CAMERAS), WIDTH))
        if self.readout == "mlp":
            self.head = nn.Sequential(nn.Linear((len(CAMERAS) * tokens + 1) * WIDTH, 256), nn.GELU(),
                                      nn.Linear(256, 3))
        else:
            self.head = nn.Linear(len(CAMERAS) * tokens * WIDTH, 3)

    def forward(self, images: dict[str, torch.Tensor], tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).float()
        text = (self.words(tokens) * keep).sum(1) / keep.sum(1).clamp_min(1.0)  # [B, D]
        per_camera = []
        for i, cam in enumerate(CAMERAS):
            x = (self.encoder.head(images[cam], text) if self.kind == "efficientnet_lite0_film"
                 else self.encoder(images[cam]))
            per_camera.append(x + self.camera_embed[i])
        if self.readout == "linear":
            return self.head(torch.cat(per_camera, dim=1).flatten(1))
        return self.head(torch.cat([*per_camera, text.unsqueeze(1)], dim=1).flatten(1))


def errors_cm(probe: TargetProbe, batches: VLABatches, frames: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Euclidean error in cm on ``frames``."""
    probe.eval()
    with torch.no_grad():
        batch = batches.batch(frames)
        images = batch.get("image_features", batch.get("images"))
        guess = probe(images, batch["tokens"], batch["token_mask"])
    probe.train()
    return 100.0 * (guess - target[frames]).norm(dim=-1)


def run(arm: str, vocab_size: int, batches: VLABatches, target: torch.Tensor, train_frames: torch.Tensor,
        first_train: torch.Tensor, first_test: torch.Tensor, minutes: float, seed: int) -> dict:
    torch.manual_seed(seed)
    probe = TargetProbe(arm, vocab_size)
    start = time.monotonic()
    params = [p for p in probe.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4)
    g = torch.Generator().manual_seed(seed)
    mean = target[train_frames].mean(0)
    steps = 0
    while steps == 0 or time.monotonic() - start < minutes * 60:  # at least one step
        frames = train_frames[torch.randint(0, len(train_frames), (64,), generator=g)]
        batch = batches.batch(frames)
        images = batch.get("image_features", batch.get("images"))
        loss = (probe(images, batch["tokens"], batch["token_mask"]) + mean - target[frames]).pow(2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps % 500 == 0:
            print(f"  {arm}: step {steps} loss {loss.item():.5f} ({time.monotonic() - start:.0f} s)", flush=True)
    target_c = target - mean
    test, train = errors_cm(probe, batches, first_test, target_c), errors_cm(probe, batches, first_train, target_c)
    return {"arm": arm, "encoder": probe.kind, "readout": probe.readout, "steps": steps,
            "train_s": round(time.monotonic() - start, 1),
            "trainable_parameters": sum(p.numel() for p in params),
            "held_out_median_cm": round(test.median().item(), 2),
            "held_out_within_2cm": round((test < 100 * SUCCESS_M).float().mean().item(), 3),
            "train_median_cm": round(train.median().item(), 2),
            "train_within_2cm": round((train < 100 * SUCCESS_M).float().mean().item(), 3),
            "held_out_episodes": len(first_test)}


def main(argv: list[str]) -> None:
    p = arms_parser(__doc__.split("\n\n")[0], ARMS, 4.0, RESULTS / "vla" / "target_probe.json",
                    arms_help="image encoder + readout (ARMS)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    texts = list(INSTRUCTIONS.table())
    tokenizer = InstructionTokenizer.train(texts)
    ds = LeRobotDataset(args.dataset)
    target = torch.tensor(ds.column("sim.target"), dtype=torch.float32)  # [N, 3]
    first = torch.tensor([ds.episode_range(e)[0] for e in range(ds.num_episodes)])
    train_frames, _, split = split_episodes(ds, args.holdout)
    rows = []
    chance = 100.0 * (target[first[split:]] - target[train_frames].mean(0)).norm(dim=-1)
    print(f"chance (the training targets' mean): held-out median {chance.median().item():.2f} cm", flush=True)
    images = VLABatches(args.dataset, tokenizer, chunk_len=1, max_text_len=16, cameras=CAMERAS)  # decoded once
    features = None  # the frozen film features, the same for every film arm: computed once
    for arm in args.arms:
        batches = images
        if ARMS[arm][0] == "efficientnet_lite0_film":
            if features is None:
                features = copy.copy(images)
                features.cache_features(InstructedKeypointEncoder(WIDTH, keypoints=1).features)
            batches = features
        rows.append(run(arm, tokenizer.vocab_size, batches, target, train_frames, first[:split],
                        first[split:], args.minutes, args.seed))
        print(rows[-1], flush=True)
    out = write_rows(args.out, rows, ["benchmarks/vla_target_probe.py", *argv],
                     dataset=str(args.dataset), train_episodes=split, success_radius_m=SUCCESS_M,
                     chance_held_out_median_cm=round(chance.median().item(), 2),
                     chance_held_out_within_2cm=round((chance < 100 * SUCCESS_M).float().mean().item(), 3))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
