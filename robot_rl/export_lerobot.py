"""Export a user's LeRobot SmolVLA (:class:`~robot_rl.models.vla.lerobot_policy.LeRobotPolicy`) as our VLA artifact.

The artifact is the one :mod:`robot_rl.export_vla` writes (``inputs: vla``, :mod:`robot_rl.deploy.vla_schema`), so
:class:`robot_rl.deploy.vla_runtime.VLARuntime`, the policy node and ``robot-rl deploy sim2sim`` run it unchanged,
without torch or LeRobot. Runs where LeRobot is (the venv of ``bash .ci/setup_lerobot``); docs/vla.md, "LeRobot
policies". What goes into the graph (:class:`LeRobotHead`), from the uint8 images, token ids, joint positions and
flow noise the runtime feeds:

- the pre-processor's normaliser, SmolVLA's image resize with padding to its resolution and ``[-1, 1]`` scaling,
  its state padding, its prefix (vision + language + state) with the KV cache, the ``num_steps`` Euler steps of
  the action expert unrolled (noise ``[B, H, A]`` an input, padded to ``max_action_dim`` with zeros as
  :meth:`LeRobotPolicy.act` does), the post-processor's un-normaliser;
- our action map: with ``targets=True`` (the policy's ``action`` is joint targets, our recordings' ``action``)
  the targets are clipped to what the robot's action map reaches, ``offset + scale * clip((t - offset) / scale)``;
  with ``targets=False`` (it is the env action, our ``action.policy``) ``offset + scale * clip(a)``.

The tokenizer ships as tokenizer.json, the pre-processor's own (a ``tokenizers`` JSON) made to fit our runtime's
rules (:mod:`robot_rl.deploy.instruction`: ``[PAD]`` = 0, ``[UNK]`` = 1): every id is moved up by
:data:`ID_SHIFT`, the graph moves it back; the newline SmolVLA's pre-processor appends to each task is appended by
the tokenizer's normaliser. Ids are padded to ``tokenizer_max_length`` where LeRobot pads to the longest of the
batch: padded positions are masked out of the attention, so the chunk is the same (within float rounding).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.deploy.artifact import ONNX_FILE, ActionSpec, ArtifactError, ChunkExecution, PolicyMeta
from robot_rl.deploy.instruction import encode
from robot_rl.deploy.validate import graph_inputs
from robot_rl.deploy.vla_schema import TOKENIZER_FILE
from robot_rl.export import check_finite_weights, check_outputs
from robot_rl.export_vla import onnx_bytes, run_graph, vla_meta, write_vla_artifact
from robot_rl.models.vla.lerobot_policy import LeRobotPolicy

ID_SHIFT = 2
"""Our tokenizer.json's ids are LeRobot's + 2, freeing 0 (``[PAD]``) and 1 (``[UNK]``) for the runtime's rules."""
NEWLINE_AT_END = r"(?<!\n)\z"
"""Where SmolVLA's ``smolvla_new_line_processor`` puts a ``"\\n"``: the end of a task not already ending in one."""


class LeRobotHead(nn.Module):
    """A :class:`LeRobotPolicy` with the artifact's I/O (graph inputs in :func:`graph_inputs` order).

    ``forward(*images, tokens, token_mask, state, noise) -> joint targets [B, H*A]``: one uint8 ``[B, 3, H, W]``
    image per camera, ``tokens`` int64 ``[B, L]`` (ids + :data:`ID_SHIFT`, 0 padding), ``token_mask`` bool
    ``[B, L]``, ``state [B, A]`` joint positions (rad), ``noise [B, H, A]``; step-major like every artifact.
    """

    def __init__(self, policy: LeRobotPolicy, action: ActionSpec, targets: bool) -> None:
        super().__init__()
        self.lerobot = policy
        self.policy = policy.policy  # the SmolVLAPolicy module: its weights are this module's
        self.cameras = list(policy.cameras)
        self.targets = targets
        self.register_buffer("scale", torch.tensor(action.scale, dtype=torch.float32))
        self.register_buffer("offset", torch.tensor(action.offset, dtype=torch.float32))
        self.clip_low, self.clip_high = float(action.clip_low), float(action.clip_high)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Joint targets ``[B, H*A]`` (see the class docstring for the inputs)."""
        n = len(self.cameras)
        images, (tokens, token_mask, state, noise) = inputs[:n], inputs[n:]
        ids = (tokens - ID_SHIFT).clamp(min=0)  # back to LeRobot's ids; padding (0) is masked out
        chunk = self.lerobot.chunk_from_tokens(dict(zip(self.cameras, images, strict=True)), ids, token_mask,
                                               state, noise)  # [B, H, A] dataset units
        raw = (chunk - self.offset) / self.scale if self.targets else chunk
        # torch twin of robot_rl.deploy.actions.to_targets(to_raw(...)) (pinned by tests/lerobot_env)
        return (self.offset + self.scale * raw.clamp(self.clip_low, self.clip_high)).flatten(1)


def make_lerobot_meta(policy: LeRobotPolicy, robot: str, joint_names: Sequence[str],
                      default_joint_pos: Sequence[float], action: ActionSpec, control_hz: float,
                      instructions: Sequence[str], **options: Any) -> PolicyMeta:
    """A validated :class:`PolicyMeta` (``inputs: vla``) for ``policy`` on a robot: its cameras and image size
    (config.json's input features), ``chunk_size``, ``tokenizer_max_length``, ``num_steps``, an open loop of
    ``n_action_steps`` (unless ``options`` has a ``chunk_execution``); ``instructions``: the
    strings it was trained on (the task's); ``options``: :func:`robot_rl.export_vla.vla_meta`'s keywords.

    Raises:
        ArtifactError: cameras of different sizes, or a state / action size other than the robot's joints.
    """
    sizes = {shape[1:] for shape in policy.image_shapes.values()}
    if len(sizes) != 1:
        raise ArtifactError(f"cameras of different sizes {policy.image_shapes}: one graph image size per artifact",
                            key="input_features", fix="export a policy whose cameras share one image size")
    if not policy.state_dim == policy.action_dim == len(joint_names):
        raise ArtifactError(f"state {policy.state_dim} / action {policy.action_dim} vs {len(joint_names)} joints of "
                            f"{robot}", key="input_features", fix="export it for the robot it was trained on")
    config = policy.policy.config
    options.setdefault("chunk_execution", ChunkExecution("open_loop", policy.execute_len, 0.0))  # n_action_steps
    options.setdefault("config", {"lerobot": {"type": config.type, "path": str(policy.path),
                                              "n_action_steps": policy.execute_len}})
    return vla_meta(list(policy.cameras), policy.chunk_len, policy.max_text_len, config.num_steps, list(instructions),
                    robot, joint_names, default_joint_pos, action, control_hz, sizes.pop(), **options)


def tokenizer_json(policy: LeRobotPolicy) -> bytes:
    """The pre-processor's tokenizer as our tokenizer.json: ids + :data:`ID_SHIFT`, ``[PAD]`` = 0, ``[UNK]`` = 1 and
    (when the pre-processor has SmolVLA's newline step) a ``"\\n"`` appended by the normaliser.

    Raises:
        ArtifactError: a tokenizer whose vocabulary is not a token -> id table (BPE, WordPiece, WordLevel), or a
            post-processor other than a template / byte-level one (their ids could not be moved).
    """
    from tokenizers import Regex, Tokenizer, normalizers

    hf_tokenizer, newline = policy.text_tokenizer()
    data = json.loads(hf_tokenizer.backend_tokenizer.to_str())
    vocab = data["model"].get("vocab")
    if not isinstance(vocab, dict):
        raise ArtifactError(f"a {data['model'].get('type')} tokenizer (its ids cannot be moved): not supported",
                            key="tokenizer", fix="export a SmolVLA with a BPE tokenizer (SmolVLM's)")
    data["model"]["vocab"] = {"[PAD]": 0, "[UNK]": 1, **{token: i + ID_SHIFT for token, i in vocab.items()}}
    for token in data["added_tokens"]:
        token["id"] += ID_SHIFT
    specials = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True} for i, c in enumerate(("[PAD]", "[UNK]"))]
    data["added_tokens"] = specials + data["added_tokens"]
    _shift_post_processor(data.get("post_processor"))
    tokenizer = Tokenizer.from_str(json.dumps(data))
    if newline:
        append = normalizers.Replace(Regex(NEWLINE_AT_END), "\n")
        tokenizer.normalizer = append if tokenizer.normalizer is None else normalizers.Sequence(
            [tokenizer.normalizer, append])
    return tokenizer.to_str().encode()


def _shift_post_processor(processor: dict | None) -> None:
    """Move the ids of the special tokens a post-processor inserts by :data:`ID_SHIFT`, in place."""
    if processor is None or processor["type"] == "ByteLevel":
        return
    if processor["type"] == "Sequence":
        for inner in processor["processors"]:
            _shift_post_processor(inner)
    elif processor["type"] == "TemplateProcessing":
        for special in processor["special_tokens"].values():
            special["ids"] = [i + ID_SHIFT for i in special["ids"]]
    else:
        raise ArtifactError(f"a {processor['type']} post-processor: not supported", key="tokenizer.post_processor",
                            fix="export a SmolVLA with SmolVLM's tokenizer (template post-processor)")


def lerobot_token_ids(policy: LeRobotPolicy, texts: Sequence[str]) -> list[list[int]]:
    """The ids LeRobot's own pre-processor gives each of ``texts`` (unpadded): what tokenizer.json must reproduce."""
    hf_tokenizer, newline = policy.text_tokenizer()
    return [hf_tokenizer(t if not newline or t.endswith("\n") else f"{t}\n", truncation=True,
                         max_length=policy.max_text_len)["input_ids"] for t in texts]


def example_inputs(meta: PolicyMeta, tokenizer: Any, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random graph inputs of ``batch`` rows (random images, the instructions cycled through ``tokenizer``, states
    near the default pose, Gaussian noise), in :func:`graph_inputs` order."""
    gen = torch.Generator().manual_seed(seed)
    v = meta.vla
    images = [torch.randint(0, 256, (batch, 3, v.height, v.width), dtype=torch.uint8, generator=gen)
              for _ in v.cameras]
    encoded = [encode(tokenizer, v.instructions[i % len(v.instructions)], v.max_text_len) for i in range(batch)]
    tokens = torch.as_tensor(np.stack([ids for ids, _, _ in encoded]))
    mask = torch.as_tensor(np.stack([m for _, m, _ in encoded]))
    state = torch.tensor(meta.default_joint_pos) + 0.1 * torch.randn(batch, meta.action_dim, generator=gen)
    noise = torch.randn(batch, meta.chunk_length, meta.action_dim, generator=gen)
    return (*images, tokens, mask, state.float(), noise)


def export_lerobot_policy(policy: LeRobotPolicy, meta: PolicyMeta, out_dir: str | Path, targets: bool = True,
                          atol: float = 1e-4, seed: int = 0) -> Path:
    """Write ``policy.onnx``, ``tokenizer.json``, ``policy.yaml`` and ``manifest.json`` of ``policy`` into ``out_dir``.

    ``meta``: :func:`make_lerobot_meta`; ``targets``: whether the policy's ``action`` is joint targets (module
    docstring). Before a file is written: a NaN/Inf weight is refused, tokenizer.json must give every instruction
    LeRobot's own ids (+ :data:`ID_SHIFT`), and onnxruntime must match torch within ``atol`` on a random batch of 3.

    Raises:
        ArtifactError: a policy this cannot export (LeRobot's aloha adaptation), non-finite weights, a tokenizer
            that differs from LeRobot's, or a graph that differs from torch.
    """
    from tokenizers import Tokenizer

    if policy.policy.config.adapt_to_pi_aloha:
        raise ArtifactError("SmolVLA's adapt_to_pi_aloha is not exported", key="adapt_to_pi_aloha", value=True,
                            fix="run it with robot-rl vla-lerobot-eval instead")
    policy.policy.eval()
    head = LeRobotHead(policy, meta.action, targets).eval()
    out = Path(out_dir)
    check_finite_weights(head, out)
    tokens_json = tokenizer_json(policy)
    tokenizer = Tokenizer.from_str(tokens_json.decode())
    for text, expected in zip(meta.vla.instructions, lerobot_token_ids(policy, meta.vla.instructions), strict=True):
        ids, _, _ = encode(tokenizer, text, meta.vla.max_text_len)
        if ids[ids != 0].tolist() != [i + ID_SHIFT for i in expected]:
            raise ArtifactError(f"tokenizer.json encodes {text!r} as {ids.tolist()}, LeRobot as {expected} "
                                f"(+{ID_SHIFT})", file=TOKENIZER_FILE, fix="report this: the tokenizer does not map")
    examples = example_inputs(meta, tokenizer, 3, seed)
    with torch.no_grad():
        expected = head(*examples).numpy()
    names = [name for name, _, _ in graph_inputs(meta)]
    data = onnx_bytes(head, examples, names)
    check_outputs(ONNX_FILE, expected, run_graph(data, names, examples), atol)
    return write_vla_artifact(out, data, tokens_json, meta)
