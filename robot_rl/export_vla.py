"""Export a :class:`~robot_rl.models.vla.policy.VLAPolicy` as a policy artifact the ROS node runs without torch.

The artifact (``inputs: vla``, :mod:`robot_rl.deploy.vla_schema`)::

    policy.onnx     image_<camera> uint8 [B, 3, H, W] per camera, tokens int64 [B, L], token_mask bool [B, L],
                    state float32 [B, A], noise float32 [B, H, A]  ->  action float32 [B, H*A] (joint targets)
    tokenizer.json  the instruction tokenizer (tokenizers JSON)
    policy.yaml     PolicyMeta with the vla section: cameras, image size and format, resize rule, state, noise,
                    tokenizer, instructions, topics; chunk_length and chunk_execution as every artifact
    manifest.json   the sha256 of every other file, written last

The flow integration (``VLAConfig.num_steps`` Euler steps from ``noise`` at t = 1 to t = 0) is traced into the
graph step by step (``torch.export``, the dynamo ONNX exporter, with the batch dimension dynamic), with the noise a
graph input: zeros give the deterministic policy, a runtime may feed any
noise (the RL methods of docs/vla.md steer it). Like :mod:`robot_rl.export`, the graph ends in the robot's
action map, ``target = offset + scale * clip(chunk)`` (:class:`VLAHead`), and every export is checked against
torch on a random batch before a file is written. Usage::

    action = action_spec("joint_position_delta_default", 0.5, defaults)   # robot_rl.deploy.actions
    meta = make_vla_meta(policy, "so101", robot.joint_names, defaults, action, 25.0, (64, 64), task="so101_reach_lang")
    export_vla_policy(policy, meta, "outputs/run/policy")
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.deploy.artifact import (
    MANIFEST_FILE,
    META_FILE,
    ONNX_FILE,
    ActionSpec,
    ArtifactError,
    ChunkExecution,
    PolicyMeta,
    save_meta,
    sha256_file,
    write_atomic,
    write_manifest,
)
from robot_rl.deploy.validate import graph_inputs
from robot_rl.deploy.vla_schema import TOKENIZER_FILE, VLAInputs
from robot_rl.export import check_finite_weights, check_outputs
from robot_rl.models.vla.policy import VLAPolicy


def image_topic(camera: str) -> str:
    """Default ``sensor_msgs/Image`` topic of ``camera``: ``camera/<name>/image_raw`` (relative)."""
    return f"camera/{camera}/image_raw"


class VLAHead(nn.Module):
    """A :class:`VLAPolicy` with the artifact's I/O: graph inputs in :func:`graph_inputs` order -> joint targets.

    ``forward(*images, tokens, token_mask, state, noise) -> offset + scale * clip(policy(...)) [B, H*A]``, one
    uint8 ``[B, 3, H, W]`` image per camera of ``policy.cameras``, step-major like every artifact's ``action``.
    """

    def __init__(self, policy: VLAPolicy, meta: PolicyMeta) -> None:
        super().__init__()
        self.policy = policy
        self.num_cameras = len(policy.cameras)
        self.register_buffer("scale", torch.tensor(meta.action.scale, dtype=torch.float32))
        self.register_buffer("offset", torch.tensor(meta.action.offset, dtype=torch.float32))
        self.clip_low = float(meta.action.clip_low)
        self.clip_high = float(meta.action.clip_high)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Joint targets ``[B, H*A]`` (see the class docstring for the inputs)."""
        images, (tokens, token_mask, state, noise) = inputs[: self.num_cameras], inputs[self.num_cameras:]
        chunk = self.policy(tuple(images), tokens, token_mask, state, noise)  # [B, H, A] in [-1, 1]
        # torch twin of robot_rl.deploy.actions.to_targets (it runs in the graph); pinned by tests/test_export_vla.py
        return (self.offset + self.scale * chunk.clamp(self.clip_low, self.clip_high)).flatten(1)


def make_vla_meta(policy: VLAPolicy, *robot_args: Any, **options: Any) -> PolicyMeta:
    """A validated :class:`PolicyMeta` (``inputs: vla``) for ``policy`` on a robot: :func:`vla_meta` of its cameras,
    chunk, text length, flow steps and instructions. ``robot_args``: :func:`vla_meta`'s ``robot, joint_names,
    default_joint_pos, action, control_hz, image_size`` (which must be the policy's ``VLAConfig.image_size``, square);
    ``options``: its keywords."""
    c = policy.model.config
    if tuple(robot_args[5]) != (c.image_size, c.image_size):
        raise ValueError(f"image_size {tuple(robot_args[5])} differs from the {c.image_size}x{c.image_size} images the "
                         "policy was trained on (VLAConfig.image_size)")
    return vla_meta(list(policy.cameras), policy.chunk_len, c.max_text_len, c.num_steps, list(policy.instructions),
                    *robot_args, **options)


def vla_meta(
    cameras: list[str],
    chunk_len: int,
    max_text_len: int,
    flow_steps: int,
    instructions: list[str],
    robot: str,
    joint_names: Sequence[str],
    default_joint_pos: Sequence[float],
    action: ActionSpec,
    control_hz: float,
    image_size: tuple[int, int],
    *,
    chunk_execution: ChunkExecution | None = None,
    resize: str = "none",
    instruction_topic: str = "instruction",
    task: str = "",
    training: dict | None = None,
    config: dict | None = None,
) -> PolicyMeta:
    """A validated :class:`PolicyMeta` (``inputs: vla``) of any VLA graph (ours, or a LeRobot one: export_lerobot).

    ``action``: the env's action map, :func:`robot_rl.deploy.actions.action_spec` of its control settings.
    ``image_size``: ``(H, W)`` the graph takes; ``resize``: ``none`` (refuse other sizes) or ``nearest``.
    ``chunk_execution`` (None): open loop of the whole chunk. Image topics: :func:`image_topic` per camera.
    """
    vla = VLAInputs(cameras=list(cameras), image_topics=[image_topic(n) for n in cameras],
                    height=int(image_size[0]), width=int(image_size[1]), tokenizer=TOKENIZER_FILE,
                    max_text_len=int(max_text_len), instructions=list(instructions), flow_steps=int(flow_steps),
                    instruction_topic=instruction_topic, resize=resize)
    default = [float(x) for x in default_joint_pos]
    return PolicyMeta(robot=robot, joint_names=list(joint_names), default_joint_pos=default, observation=[],
                      action=action, control_hz=float(control_hz), chunk_length=int(chunk_len),
                      chunk_execution=chunk_execution, task=task, training=dict(training or {}),
                      config=dict(config or {}), inputs="vla", vla=vla).validate()


def example_inputs(policy: VLAPolicy, meta: PolicyMeta, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random graph inputs of ``batch`` rows: images, real instructions (cycled), states near the default pose,
    Gaussian noise; in :func:`graph_inputs` order."""
    gen = torch.Generator().manual_seed(seed)
    v = meta.vla
    images = [torch.randint(0, 256, (batch, 3, v.height, v.width), dtype=torch.uint8, generator=gen)
              for _ in v.cameras]
    texts = [v.instructions[i % len(v.instructions)] for i in range(batch)]
    tokens, mask = policy.encode_text(texts)
    state = torch.tensor(meta.default_joint_pos) + 0.1 * torch.randn(batch, meta.action_dim, generator=gen)
    noise = torch.randn(policy.noise_shape(batch), generator=gen)
    return (*images, tokens, mask, state.float(), noise)


def export_vla_policy(policy: VLAPolicy, meta: PolicyMeta, out_dir: str | Path, atol: float = 1e-4,
                      seed: int = 0) -> Path:
    """Write ``policy.onnx``, ``tokenizer.json``, ``policy.yaml`` and ``manifest.json`` into ``out_dir``.

    ``policy`` is copied to CPU in eval mode (the original is untouched); a NaN/Inf weight is refused. The graph
    is run by onnxruntime on a random batch of 3 (random noise) and compared with torch to ``atol``; the tokenizer
    written is read back and must encode the instructions to the ids torch used. ``manifest.json`` and
    ``policy.yaml`` are removed first and written last, so a directory holding a manifest is complete.

    Raises:
        ArtifactError: non-finite weights, a meta that does not describe ``policy`` (cameras, chunk, joints), or a
            graph that differs from torch.
    """
    meta.validate()
    if meta.vla is None:
        raise ArtifactError("export_vla_policy needs a VLA meta (inputs: vla)", key="inputs", value=meta.inputs,
                            fix="build it with make_vla_meta")
    config = policy.model.config
    if list(policy.cameras) != meta.vla.cameras or policy.chunk_len != meta.chunk_length \
            or config.action_dim != meta.action_dim or config.state_dim != meta.action_dim:
        raise ArtifactError(f"the meta does not describe the policy: cameras {meta.vla.cameras} vs "
                            f"{list(policy.cameras)}, chunk {meta.chunk_length} vs {policy.chunk_len}, joints "
                            f"{meta.action_dim} vs action {config.action_dim} / state {config.state_dim}",
                            fix="build the meta with make_vla_meta(policy, ...)")
    head = VLAHead(copy.deepcopy(policy).cpu().eval(), meta).eval()
    out = Path(out_dir)
    check_finite_weights(head, out)
    examples = example_inputs(head.policy, meta, 3, seed)
    with torch.no_grad():
        expected = head(*examples).numpy()
    names = [name for name, _, _ in graph_inputs(meta)]
    data = onnx_bytes(head, examples, names)
    check_outputs(ONNX_FILE, expected, run_graph(data, names, examples), atol)
    return write_vla_artifact(out, data, _tokenizer_bytes(head.policy, meta), meta)


def write_vla_artifact(out: Path, onnx: bytes, tokenizer_json: bytes, meta: PolicyMeta) -> Path:
    """Write a checked graph, its tokenizer JSON, ``policy.yaml`` (with their sha256) and ``manifest.json`` into
    ``out``. The manifest and policy.yaml are removed first and written last: a directory with a manifest is
    complete."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    (out / META_FILE).unlink(missing_ok=True)
    write_atomic(out / ONNX_FILE, onnx)
    write_atomic(out / TOKENIZER_FILE, tokenizer_json)
    files = {name: sha256_file(out / name) for name in (ONNX_FILE, TOKENIZER_FILE)}
    save_meta(dataclasses.replace(meta, files=files), out)
    write_manifest(out, [META_FILE, *files])
    return out


def run_graph(onnx: bytes, names: list[str], inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The ``action`` output of the graph ``onnx`` under onnxruntime (CPU) for ``inputs`` named ``names``."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    return session.run(["action"], dict(zip(names, (x.numpy() for x in inputs), strict=True)))[0]


def onnx_bytes(head: nn.Module, examples: tuple[torch.Tensor, ...], names: list[str]) -> bytes:
    """The ONNX graph (opset 18) of ``head`` (``forward(*inputs)``) by ``torch.export`` (the dynamo exporter),
    dimension 0 of every input dynamic.

    Chosen over the TorchScript tracer of :func:`robot_rl.export.onnx_bytes` for VLA graphs: the tracer spells the
    attention layers' shapes out as ~9k nodes (Reshape, Shape, Gather, ...) whose per-node overhead made one
    ``VLAConfig.cpu`` inference 7 ms, against 2 ms for the ~1.9k nodes of this exporter (2 cameras, 64x64, one
    thread; docs/results/vla.md). ``examples`` needs a batch >= 2 so the batch dimension is not specialised.
    """
    batch = torch.export.Dim("batch", min=1, max=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quiet = [logging.getLogger(name) for name in ("onnxscript", "torch.onnx", "torch.export")]
        levels = [log.level for log in quiet]
        for log in quiet:
            log.setLevel(logging.ERROR)
        try:
            program = torch.onnx.export(head, examples, input_names=names, output_names=["action"],
                                        dynamic_shapes=(tuple({0: batch} for _ in names),), opset_version=18,
                                        dynamo=True, optimize=True, verbose=False)
        finally:
            for log, level in zip(quiet, levels, strict=True):
                log.setLevel(level)
    return program.model_proto.SerializeToString()


def _tokenizer_bytes(policy: VLAPolicy, meta: PolicyMeta) -> bytes:
    """The tokenizer JSON, checked to encode every instruction as torch does through the deploy encoder."""
    from robot_rl.deploy.instruction import encode, load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / TOKENIZER_FILE
        policy.tokenizer.save(path)
        data = path.read_bytes()
        loaded = load_tokenizer(path)
    tokens, _ = policy.encode_text(meta.vla.instructions)
    for text, row in zip(meta.vla.instructions, tokens.numpy(), strict=True):
        ids, _, _ = encode(loaded, text, meta.vla.max_text_len)
        if not (ids == row).all():
            raise ArtifactError(f"the saved tokenizer encodes {text!r} as {ids.tolist()}, torch as {row.tolist()}",
                                file=TOKENIZER_FILE, fix="report this: the tokenizer does not round-trip")
    return data
