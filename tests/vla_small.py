"""The small untrained VLA policy and its artifact that the export tests and the fuzz corpus share.

:func:`small_policy` (2 cameras, 32x32 images, chunk 4, 3 Euler steps, 3 keypoints so the spatial softmax is in the
graph) exported by :func:`export` for the SO-101: the ONNX export (the dynamo exporter) takes ~40-50 s, so the test
session builds it once (``tests/conftest.py``'s ``small_vla_artifact``) for tests/test_export_vla.py and the fuzz
cases of kind ``vla_artifact``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from robot_rl.deploy.actions import action_spec
from robot_rl.deploy.artifact import PolicyMeta
from robot_rl.export_vla import export_vla_policy, make_vla_meta
from robot_rl.models.vla import VLA, InstructionTokenizer, VLAConfig
from robot_rl.models.vla.policy import VLAPolicy

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
DEFAULT = [0.0, -1.0, 1.0, 0.6, 0.0, 0.0]
INSTRUCTIONS = ["reach the red target", "touch the blue sphere", "go to the green one"]
SIZE = 32
ACTION = action_spec("joint_position_delta_default", 0.5, DEFAULT)


def small_policy(cameras=("front", "wrist"), image_encoder="conv", **extra) -> VLAPolicy:
    """The small untrained policy (seeded: the same weights every call)."""
    torch.manual_seed(0)
    tokenizer = InstructionTokenizer.train(INSTRUCTIONS)
    config = VLAConfig.cpu(state_dim=6, action_dim=6, vocab_size=tokenizer.vocab_size, cameras=cameras,
                           chunk_len=4, width=32, heads=2, num_steps=3, max_text_len=8, image_encoder=image_encoder,
                           image_size=SIZE, image_keypoints=3, **extra)  # keypoints: the spatial softmax in the graph
    model = VLA(config)
    model.set_stats(torch.tensor(DEFAULT), torch.full((6,), 0.3), torch.zeros(6), torch.full((6,), 0.5))
    return VLAPolicy(model, tokenizer, INSTRUCTIONS).eval()


def export(policy: VLAPolicy, out: Path | str, **kw) -> tuple[Path, PolicyMeta]:
    """``policy`` as an SO-101 artifact at ``out`` (task so101_reach_lang, 25 Hz); ``(out, meta)``."""
    meta = make_vla_meta(policy, "so101", JOINTS, DEFAULT, ACTION, 25.0, (SIZE, SIZE), task="so101_reach_lang",
                         **kw)
    return export_vla_policy(policy, meta, out), meta
