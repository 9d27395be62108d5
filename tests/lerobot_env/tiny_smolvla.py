"""A tiny SmolVLA made offline, trained a few steps on one of our recordings and saved as a LeRobot policy directory.

Test support for tests/lerobot_env (the venv of ``bash .ci/setup_lerobot``), also a script that makes a demo policy
for ``robot-rl vla-lerobot-eval`` (docs/vla.md, "LeRobot policies"):

    python tests/lerobot_env/tiny_smolvla.py <recorded dataset> <out dir> [--steps 200]

SmolVLA needs a SmolVLM2 backbone directory even without its weights (it reads the backbone's config, tokenizer
and processor). No such weights ship in any wheel and the hub is off, so :func:`build_backbone` makes a
SmolVLM2-shaped one: a byte-level BPE trained on the instruction strings with SmolVLM's special tokens, a
2-layer llama text model (width 64) and a 1-layer vision model on 64 px images (16 px patches), random weights.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it: nothing here may download

import torch

SPECIAL_TOKENS = {"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                  "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}
PAD = "<|endoftext|>"
CHUNK, STEPS = 8, 30
"""The tests' policy: chunk of 8 actions, trained 30 steps (tests/lerobot_env/conftest.py)."""


def build_backbone(out: Path, texts: Sequence[str], image_size: int = 64) -> Path:
    """Save a random SmolVLM2-shaped config + processor (tokenizer trained on ``texts``) to ``out``; returns ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(list(texts), trainers.BpeTrainer(
        vocab_size=300, special_tokens=[PAD, *SPECIAL_TOKENS.values()],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=PAD, eos_token="<end_of_utterance>",
                                        pad_token=PAD, unk_token=PAD, extra_special_tokens=SPECIAL_TOKENS)
    config = SmolVLMConfig(
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 512, "pad_token_id": tokenizer.pad_token_id},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": image_size, "patch_size": 16},
        image_token_id=tokenizer.image_token_id, scale_factor=2, pad_token_id=tokenizer.pad_token_id)
    images = SmolVLMImageProcessor(size={"longest_edge": image_size}, max_image_size={"longest_edge": image_size},
                                   do_image_splitting=False)
    processor = SmolVLMProcessor(image_processor=images, tokenizer=tokenizer, video_processor=SmolVLMVideoProcessor(),
                                 image_seq_len=(image_size // 16 // 2) ** 2)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def make_smolvla(backbone: Path, dataset_stats: dict, camera: str = "front", image_size: int = 64, state_dim: int = 6,
                 action_dim: int = 6, chunk: int = 8):
    """``(policy, preprocessor, postprocessor)``: a SmolVLA on ``backbone`` (2 VLM layers, chunk of ``chunk``, 4 flow
    steps) for camera ``observation.images.<camera>``, ``observation.state [state_dim]`` and ``action [action_dim]``,
    normalising with ``dataset_stats`` (LeRobot's ``dataset.meta.stats``)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    config = SmolVLAConfig(
        vlm_model_name=str(backbone), load_vlm_weights=False, num_vlm_layers=2, chunk_size=chunk, n_action_steps=chunk,
        max_state_dim=8, max_action_dim=8, resize_imgs_with_padding=(image_size, image_size), tokenizer_max_length=16,
        num_steps=4, device="cpu", push_to_hub=False,
        input_features={f"observation.images.{camera}": PolicyFeature(FeatureType.VISUAL, (3, image_size, image_size)),
                        "observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))})
    policy = SmolVLAPolicy(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=dataset_stats)
    return policy, preprocessor, postprocessor


def open_dataset(root: Path, fps: int, chunk: int):
    """Our recording at ``root`` as LeRobot's own ``LeRobotDataset``, ``action`` as chunks of ``chunk`` steps (pyav
    decoding: LeRobot's torchcodec does not load in this venv)."""
    from lerobot.datasets import LeRobotDataset

    return LeRobotDataset("local/robot_rl", root=root, video_backend="pyav",
                          delta_timestamps={"action": [i / fps for i in range(chunk)]})


def frames(dataset_root: Path, rows: Sequence[int], chunk: int = CHUNK):
    """``(images {front: uint8 [B, 3, 64, 64]}, texts, state [B, 6])`` of recorded frames ``rows``, via LeRobot."""
    ds = open_dataset(dataset_root, 25, chunk)
    items = [ds[i] for i in rows]
    images = torch.stack([(it["observation.images.front"] * 255).round().to(torch.uint8) for it in items])
    return {"front": images}, [it["task"] for it in items], torch.stack([it["observation.state"] for it in items])


def train(policy, preprocessor, dataset, steps: int, batch_size: int = 8, lr: float = 1e-3,
          seed: int = 0) -> list[float]:
    """``steps`` AdamW steps of LeRobot's SmolVLA loss on ``dataset`` (its trainable parameters: the action expert,
    projections); returns the losses."""
    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    optim = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)
    policy.train()
    losses: list[float] = []
    while len(losses) < steps:
        for batch in loader:
            loss, _ = policy.forward(preprocessor(batch))
            optim.zero_grad()
            loss.backward()
            optim.step()
            losses.append(float(loss.detach()))
            if len(losses) == steps:
                break
    policy.eval()
    return losses


def make_policy_dir(dataset_root: Path, out: Path, steps: int, chunk: int = 8) -> list[float]:
    """Backbone in ``out/backbone``, SmolVLA trained ``steps`` steps on ``dataset_root`` (our ``action``: joint
    targets) saved to ``out/policy`` with LeRobot's ``save_pretrained`` and its processors; returns the losses."""
    from robot_rl.data.lerobot import LeRobotDataset as OurDataset

    ours = OurDataset(dataset_root)
    dataset = open_dataset(dataset_root, ours.fps, chunk)
    height = dataset.meta.features["observation.images.front"]["shape"][0]
    backbone = build_backbone(out / "backbone", sorted(set(ours.tasks)), image_size=height)
    policy, preprocessor, postprocessor = make_smolvla(backbone, dataset.meta.stats, image_size=height, chunk=chunk)
    losses = train(policy, preprocessor, dataset, steps)
    for part in (policy, preprocessor, postprocessor):
        part.save_pretrained(out / "policy")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="a robot-rl record dataset with camera front")
    parser.add_argument("out", type=Path, help="writes out/backbone and out/policy")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    start = time.perf_counter()
    losses = make_policy_dir(args.dataset, args.out, args.steps)
    print(f"{args.steps} steps in {time.perf_counter() - start:.0f} s: loss {losses[0]:.3f} -> "
          f"{sum(losses[-10:]) / len(losses[-10:]):.3f} (last 10); policy in {args.out / 'policy'}")
