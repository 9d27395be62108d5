"""The one artifact validator: every loader (``deploy check``, the policy node, ``eval`` of an artifact,
sim2sim) goes through :func:`load_policy` via :class:`~robot_rl.deploy.runtime.PolicyRuntime`.

Order of the checks, each refusing with an :class:`~robot_rl.deploy.artifact.ArtifactError` naming the
file, the key, the value and the fix:

1. ``manifest.json``: present, and every file's sha256 matches (policy.yaml included);
2. ``policy.yaml``: every field present, typed, every number finite and in range;
3. ``policy.onnx``: loads, input ``obs`` ``[B, D]`` (a VLA artifact: the inputs of :func:`graph_inputs`) and
   output ``action`` ``[B, H*A]`` float32 as policy.yaml says, and one inference on zeros returns that shape;
   a VLA artifact's tokenizer is listed in ``files`` (so checksummed), loads (:func:`load_tokenizer`), encodes
   every trained instruction without ``[UNK]`` and has no id the graph cannot embed (:func:`check_tokenizer`);
4. against the robot (when given, :class:`RobotSpec`): joint names and order, the default pose and
   the action offset inside the joint limits, the default pose equal to robot.yaml's.

numpy + onnxruntime + PyYAML only (no torch): the ROS nodes import this on a robot computer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from robot_rl.deploy.artifact import (
    MAX_CONTROL_HZ,
    ONNX_FILE,
    REEXPORT,
    ArtifactError,
    PolicyMeta,
    check_joint_order,
    load_meta,
)
from robot_rl.deploy.instruction import UNK_ID, encode, load_tokenizer
from robot_rl.deploy.safety import robot_yaml_source

DEFAULT_POSE_ATOL = 1e-6
"""rad: how far the artifact's default pose may be from robot.yaml's (the ``joint_pos`` origin)."""

_ORT_ERRORS = (ort_errors.Fail, ort_errors.InvalidArgument, ort_errors.InvalidGraph, ort_errors.InvalidProtobuf,
               ort_errors.NoSuchFile, ort_errors.NotImplemented, ort_errors.RuntimeException)
"""What onnxruntime raises for a file that is not a usable ONNX graph."""


@dataclass(frozen=True)
class RobotSpec:
    """What the validator needs of the robot: ``[A]`` arrays in the robot's command order.

    Attributes:
        source: where these came from, for messages (a robot.yaml path or "policy_node parameters").
    """

    source: str
    joint_names: list[str]
    lower: np.ndarray
    upper: np.ndarray
    default: np.ndarray

    def __post_init__(self) -> None:
        A = len(self.joint_names)
        for key in ("lower", "upper", "default"):
            values = np.asarray(getattr(self, key), dtype=np.float64)
            if values.shape != (A,) or not np.all(np.isfinite(values)):
                raise ArtifactError(f"must be {A} finite numbers, one per joint of {self.joint_names}",
                                    file=self.source, key=key, value=values.tolist(),
                                    fix="regenerate it from hardware/<robot>/robot.yaml (robot-rl ros params)")
            object.__setattr__(self, key, values)
        if not np.all(self.lower < self.upper):
            raise ArtifactError("joint limits need lower < upper", file=self.source, key="lower",
                                value=self.lower.tolist(), fix="fix the limits in robot.yaml")

    @classmethod
    def from_robot(cls, robot: dict[str, Any]) -> RobotSpec:
        """From ``RobotConfig.as_dict()`` (already validated by ``sim.robots.load_robot``)."""
        joints = robot["joints"]
        return cls(source=robot_yaml_source(robot),
                   joint_names=[j["name"] for j in joints],
                   lower=np.array([j["lower"] for j in joints], dtype=np.float64),
                   upper=np.array([j["upper"] for j in joints], dtype=np.float64),
                   default=np.array([j["default"] for j in joints], dtype=np.float64))


def check_against_robot(meta: PolicyMeta, robot: RobotSpec, source: object) -> None:
    """Refuse an artifact (``source``: its policy.yaml) that would be unsafe on ``robot``.

    Raises:
        ArtifactError: joint names or order differ; the default pose or the action offset lies
            outside the joint limits; the default pose differs from the robot's (the ``joint_pos``
            observation would be offset by the difference).
    """
    check_joint_order(meta, robot.joint_names)
    default = np.asarray(meta.default_joint_pos, dtype=np.float64)
    for key, values in (("default_joint_pos", default), ("action.offset", np.asarray(meta.action.offset))):
        outside = np.flatnonzero((values < robot.lower) | (values > robot.upper))
        if outside.size:
            j = int(outside[0])
            raise ArtifactError(
                f"joint {meta.joint_names[j]!r} at {values[j]:g} is outside its limits "
                f"[{robot.lower[j]:g}, {robot.upper[j]:g}] of {robot.source}",
                file=source, key=f"{key}[{j}]", value=float(values[j]), fix=REEXPORT)
    differs = np.flatnonzero(np.abs(default - robot.default) > DEFAULT_POSE_ATOL)
    if differs.size:
        j = int(differs[0])
        raise ArtifactError(
            f"joint {meta.joint_names[j]!r} differs from default {robot.default[j]:g} of {robot.source}: the "
            f"joint_pos observation (q - default) would be offset by {default[j] - robot.default[j]:+.4g} rad",
            file=source, key=f"default_joint_pos[{j}]", value=float(default[j]),
            fix=f"re-export the policy for this robot.yaml (its defaults {robot.default.tolist()})")


def _dim(value: Any) -> int | None:
    """A static ONNX dimension, or None for a symbolic one (``"batch"``)."""
    return value if isinstance(value, int) else None


_ONNX_TYPES = {np.uint8: "tensor(uint8)", np.int64: "tensor(int64)", np.bool_: "tensor(bool)",
               np.float32: "tensor(float)"}


def graph_inputs(meta: PolicyMeta) -> list[tuple[str, type, tuple[int, ...]]]:
    """``[(name, numpy dtype, shape without the batch)]`` of the graph's inputs, in order.

    ``vector``: ``obs`` float32 ``[D]``. ``vla``: ``image_<camera>`` uint8 ``[3, H, W]`` per camera, ``tokens``
    int64 ``[L]``, ``token_mask`` bool ``[L]``, ``state`` float32 ``[A]``, ``noise`` float32 ``[H, A]``.
    """
    if meta.vla is None:
        return [("obs", np.float32, (meta.observation_dim,))]
    v, A = meta.vla, meta.action_dim
    images = [(f"image_{c}", np.uint8, (3, v.height, v.width)) for c in v.cameras]
    return [*images, ("tokens", np.int64, (v.max_text_len,)), ("token_mask", np.bool_, (v.max_text_len,)),
            ("state", np.float32, (A,)), ("noise", np.float32, (meta.chunk_length, A))]


def open_session(path: Path, meta: PolicyMeta, threads: int = 1) -> ort.InferenceSession:
    """Load ``policy.onnx`` and check its input/output names, types and shapes against ``meta``.

    Raises:
        ArtifactError: not an ONNX graph onnxruntime can load, or I/O that differs from policy.yaml's
            :func:`graph_inputs` -> ``action [B, H*A]`` (checked statically and by one inference on zeros).
    """
    HA = meta.chunk_length * meta.action_dim
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except _ORT_ERRORS as exc:
        raise ArtifactError(f"not an ONNX graph onnxruntime can load ({str(exc).strip()[:300]})", file=path,
                            fix=REEXPORT) from exc
    specs = graph_inputs(meta)
    expected = [*specs, ("action", np.float32, (HA,))]
    names = [a.name for a in session.get_inputs()] + [a.name for a in session.get_outputs()]
    if names != [name for name, _, _ in expected]:
        raise ArtifactError(f"must have inputs {[n for n, _, _ in specs]} and one output 'action' as policy.yaml "
                            f"says (inputs: {meta.inputs})", file=path, key="inputs/outputs", value=names,
                            fix=REEXPORT)
    for arg, (name, dtype, shape) in zip([*session.get_inputs(), *session.get_outputs()], expected, strict=True):
        dims = arg.shape[1:]
        if arg.type != _ONNX_TYPES[dtype] or len(dims) != len(shape) \
                or any(_dim(d) not in (None, want) for d, want in zip(dims, shape, strict=True)):
            inputs = f"observation {meta.observation_dim}" if meta.vla is None else \
                f"vla {meta.vla.height}x{meta.vla.width} images, {meta.vla.max_text_len} tokens"
            raise ArtifactError(
                f"must be {_ONNX_TYPES[dtype]} [B, {', '.join(map(str, shape))}] as policy.yaml says ({inputs}, "
                f"chunk_length {meta.chunk_length} x {meta.action_dim} joints); the files come from different exports",
                file=path, key=f"{'output' if name == 'action' else 'input'} {name!r}",
                value=f"{arg.type} {arg.shape}",
                fix=REEXPORT)
    try:
        probe = session.run(["action"], {name: np.zeros((1, *shape), dtype=dtype) for name, dtype, shape in specs})[0]
    except _ORT_ERRORS as exc:
        raise ArtifactError(f"fails on zero inputs ({str(exc).strip()[:300]})", file=path, fix=REEXPORT) from exc
    if tuple(probe.shape) != (1, HA):
        raise ArtifactError(f"returns shape {tuple(probe.shape)} for a batch of 1, policy.yaml needs [1, {HA}] "
                            f"(chunk_length {meta.chunk_length} x {meta.action_dim} joints)", file=path,
                            key="output 'action'", value=list(probe.shape), fix=REEXPORT)
    return session


def check_tokenizer(session: ort.InferenceSession, meta: PolicyMeta, tokenizer: Any, artifact_dir: Path) -> None:
    """Refuse a VLA artifact whose tokenizer does not fit its policy.yaml and graph.

    Raises:
        ArtifactError: a trained instruction (``vla.instructions``) the tokenizer maps to ``[UNK]``, or a
            tokenizer id above what the graph embeds (one inference with every token the highest id).
    """
    v = meta.vla
    for i, text in enumerate(v.instructions):
        if UNK_ID in encode(tokenizer, text, v.max_text_len)[0]:
            raise ArtifactError(f"{text!r} holds characters its tokenizer maps to [UNK] (the policy never trained "
                                f"on them)", file=artifact_dir / "policy.yaml", key=f"vla.instructions[{i}]",
                                value=text, fix=REEXPORT)
    top = max(tokenizer.get_vocab(with_added_tokens=True).values())
    feeds = {name: np.zeros((1, *shape), dtype=dtype) for name, dtype, shape in graph_inputs(meta)}
    feeds["tokens"][:], feeds["token_mask"][:] = top, True
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # the refusal below says it; onnxruntime's own error line would repeat it
    try:
        session.run(["action"], feeds, quiet)
    except _ORT_ERRORS as exc:
        raise ArtifactError(f"has ids up to {top} that policy.onnx cannot embed ({str(exc).strip()[:200]}): "
                            "the tokenizer and the graph come from different exports",
                            file=artifact_dir / v.tokenizer, fix=REEXPORT) from exc


def load_policy(artifact_dir: str | Path, robot: RobotSpec | None = None,
                threads: int = 1) -> tuple[PolicyMeta, ort.InferenceSession]:
    """Validate an artifact (module docstring, steps 1-4) and return its metadata and ONNX session."""
    artifact_dir = Path(artifact_dir)
    meta = load_meta(artifact_dir)
    if ONNX_FILE not in meta.files:
        raise ArtifactError(f"lists no {ONNX_FILE}", file=artifact_dir / "policy.yaml", key="files",
                            value=sorted(meta.files), fix="export with formats including 'onnx'")
    if meta.vla is not None:
        if meta.vla.tokenizer not in meta.files:
            raise ArtifactError(f"lists no {meta.vla.tokenizer} (vla.tokenizer): the tokenizer must be checksummed "
                                "like every file", file=artifact_dir / "policy.yaml", key="files",
                                value=sorted(meta.files), fix=REEXPORT)
        tokenizer = load_tokenizer(artifact_dir / meta.vla.tokenizer)
    session = open_session(artifact_dir / ONNX_FILE, meta, threads)
    if meta.vla is not None:
        check_tokenizer(session, meta, tokenizer, artifact_dir)
    if robot is not None:
        check_against_robot(meta, robot, artifact_dir / "policy.yaml")
    return meta, session


def check_control_hz(value: float, source: object, key: str = "control_hz") -> float:
    """A control-rate override (ROS parameter): 0 (the artifact's rate) or in ``(0, MAX_CONTROL_HZ]``."""
    if not math.isfinite(value) or not 0 <= value <= MAX_CONTROL_HZ:
        raise ArtifactError(f"must be 0 (the artifact's rate) or in (0, {MAX_CONTROL_HZ:g}] Hz", file=source,
                            key=key, value=value, fix="remove the override or give the rate in Hz")
    return value
