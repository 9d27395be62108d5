"""The policy artifact schema (DESIGN.md, contract 3): ``policy.yaml`` beside ``policy.onnx``/``policy.pt``.

An artifact directory needs nothing from training to run. ``inputs: vector`` (the default, every artifact
before VLA policies)::

    policy.onnx   input "obs" float32 [B, D]: the env's "policy" observation (every term already
                  multiplied by its scale); output "action" float32 [B, H*A]: joint targets in robot
                  units (normalisation, clip, scale and offset are inside the graph).
    policy.pt     TorchScript with the same input and output.
    policy.yaml   :class:`PolicyMeta`, with the sha256 of the graphs.
    manifest.json the sha256 of every other file, policy.yaml included; written last, so a directory
                  with a manifest is complete. Every loader verifies it (:func:`load_meta`).

``inputs: vla`` (a vision-language-action policy, :class:`VLAInputs`): ``policy.onnx`` takes one uint8
``image_<camera> [B, 3, H, W]`` per camera, ``tokens`` int64 ``[B, L]``, ``token_mask`` bool ``[B, L]``, ``state``
float32 ``[B, A]`` (measured joint positions) and ``noise`` float32 ``[B, H, A]`` and returns the same ``action``
``[B, H*A]``; ``tokenizer.json`` (the instruction tokenizer, ``tokenizers`` JSON) sits beside it; no ``policy.pt``.

Only numpy and PyYAML here: the ROS nodes import this module on a robot computer without torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robot_rl.deploy.chunking import CHUNK_MODES
from robot_rl.deploy.vla_schema import INPUT_KINDS, VLAInputs
from robot_rl.errors import InputError, check_finite

SCHEMA_VERSION = 1
META_FILE = "policy.yaml"
MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
MAX_CONTROL_HZ = 1000.0
"""Highest accepted ``control_hz``: above it the node would tick on every JointState of any driver."""
REEXPORT = "re-export the policy from its run (robot-rl export <run>)"
ONNX_FILE = "policy.onnx"
TORCHSCRIPT_FILE = "policy.pt"

OBSERVATION_TERMS = {
    "joint_pos": "q - default, per joint in action order [A]",
    "joint_vel": "qdot, per joint in action order [A]",
    "base_ang_vel": "IMU gyro in the body frame [3]",
    "projected_gravity": "unit gravity vector in the IMU frame [3]",
    "velocity_command": "commanded (vx, vy, yaw rate) [3]",
    "target_pos": "target position in the robot base frame [3]",
    "cube_pos": "manipulated object (cube) position in the robot base frame [3]",
    "last_action": "previous raw policy action in [-1, 1] [A]",
    "gait_phase": "(sin, cos) of 2 pi t / 0.8 s, t = time since the controller (or the episode) started [2]",
}
"""The policy observation vocabulary: what a real robot publishes (contract 1)."""
TERM_SIZES = {"gait_phase": 2}
"""Sizes of the fixed-size terms that are not 3 values (the per-joint terms have ``A``)."""

ACTION_TYPES = ("joint_position_delta_default", "joint_position")
"""Both are ``target = offset + scale * clip(a)``: ``joint_position_delta_default`` has offset =
default pose; ``joint_position`` maps [-1, 1] onto the joint range (offset = mid-range, scale =
half-range), as the simulator does."""


class ArtifactError(InputError):
    """A policy artifact that is incomplete, inconsistent, tampered with or made for another robot.

    An :class:`~robot_rl.errors.InputError`: ``robot-rl`` prints it and exits 2, the policy node
    refuses to start with it (exit 2).
    """


@dataclass(frozen=True)
class ObservationTerm:
    """One named slice of the policy observation: ``observed = raw * scale``, ``size`` values."""

    name: str
    size: int
    scale: float = 1.0


@dataclass(frozen=True)
class ActionSpec:
    """How the raw policy output ``a`` in ``[clip_low, clip_high]^A`` becomes joint targets.

    ``target[j] = offset[j] + scale[j] * clip(a[j], clip_low, clip_high)`` — computed inside the
    exported graph; kept here so the runtime can recover the raw action (``last_action``).
    """

    type: str
    scale: list[float]
    offset: list[float]
    clip_low: float = -1.0
    clip_high: float = 1.0


@dataclass(frozen=True)
class ChunkExecution:
    """How the ``H`` actions of one inference are played (:class:`robot_rl.deploy.chunking.ChunkExecutor`).

    Attributes:
        mode: ``open_loop`` (infer every ``execute_len`` steps) or ``temporal_ensemble`` (infer every step).
        execute_len: open loop: actions played per inference, ``1..H``.
        ensemble_decay: temporal ensemble: ``m >= 0`` in ACT's ``w_i = exp(-m i)``, ``i = 0`` the OLDEST
            prediction of the current step (older predictions weigh more; 0 = plain mean).
    """

    mode: str
    execute_len: int
    ensemble_decay: float


@dataclass(frozen=True)
class PolicyMeta:
    """Everything ``policy.yaml`` holds. Lists are in action (joint) order.

    Attributes:
        robot: robot name, as ``hardware/<robot>/robot.yaml``'s ``name``.
        joint_names: ``[A]`` joints in action order; the runtime refuses a robot that differs.
        default_joint_pos: ``[A]`` default pose (rad), the origin of the ``joint_pos`` term.
        observation: ordered terms; their sizes add up to ``D``.
        action: scale/offset/clip of the ``[B, H*A]`` output.
        control_hz: policy rate (Hz).
        chunk_length: ``H``, actions per inference (1 for a plain policy).
        chunk_execution: how a chunk is played, the way training collected it; absent (artifacts from
            before it): open loop of the whole chunk (``execute_len = H``).
        task: the training task, e.g. ``so101_reach``.
        training: summary (algorithm, steps, eval success, ...), free-form.
        config: the resolved source config, free-form.
        files: ``{file name: sha256}`` of the exported graphs (and a VLA's tokenizer), checked on load.
        inputs: :data:`INPUT_KINDS`: ``vector`` (``observation`` describes ``obs``) or ``vla`` (``observation`` is
            empty, ``vla`` describes the images, instruction and state).
        vla: the inputs of a VLA artifact; None for ``vector``.
        schema_version: :data:`SCHEMA_VERSION`.
    """

    robot: str
    joint_names: list[str]
    default_joint_pos: list[float]
    observation: list[ObservationTerm]
    action: ActionSpec
    control_hz: float
    chunk_length: int = 1
    chunk_execution: ChunkExecution | None = None
    task: str = ""
    training: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    inputs: str = "vector"
    vla: VLAInputs | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.chunk_execution is None:  # an artifact from before chunk_execution: open loop, whole chunk
            object.__setattr__(self, "chunk_execution", ChunkExecution("open_loop", self.chunk_length, 0.0))

    @property
    def action_dim(self) -> int:
        """``A``, joints per action."""
        return len(self.joint_names)

    @property
    def observation_dim(self) -> int:
        """``D``, the sum of the term sizes."""
        return sum(t.size for t in self.observation)

    def validate(self, source: object = META_FILE) -> PolicyMeta:
        """Raise :class:`ArtifactError` naming ``source``, the first bad key and its value; return ``self``.

        Every number must be finite and in range before it can steer a robot: ``control_hz`` in
        ``(0, MAX_CONTROL_HZ]``, ``action.scale > 0``, ``clip_low < clip_high``; for
        ``joint_position_delta_default`` the offset is the default pose.
        """
        def bad(key: str, value: Any, problem: str, fix: str = REEXPORT) -> ArtifactError:
            return ArtifactError(problem, file=source, key=key, value=value, fix=fix)

        if self.schema_version != SCHEMA_VERSION:
            raise bad("schema_version", self.schema_version,
                      f"not supported (this robot_rl reads {SCHEMA_VERSION})")
        names = self.joint_names
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
                or len(set(names)) != len(names):
            raise bad("joint_names", names, "must be a non-empty list of unique joint names")
        A = self.action_dim
        for key, values in (("default_joint_pos", self.default_joint_pos), ("action.scale", self.action.scale),
                            ("action.offset", self.action.offset)):
            if not isinstance(values, list) or len(values) != A:
                raise bad(key, values, f"must be a list of {A} numbers, one per joint of {names}")
            for i, v in enumerate(values):
                _finite(source, f"{key}[{i}]", v)
        if self.action.type not in ACTION_TYPES:
            raise bad("action.type", self.action.type, f"must be one of {ACTION_TYPES}")
        for i, v in enumerate(self.action.scale):
            if v <= 0:
                raise bad(f"action.scale[{i}]", v, "must be > 0 (a zero or negative scale freezes or inverts "
                          "the joint)")
        low = _finite(source, "action.clip_low", self.action.clip_low)
        high = _finite(source, "action.clip_high", self.action.clip_high)
        if not low < high:
            raise bad("action.clip_high", high, f"must be above action.clip_low {low} (the clip range is empty)")
        if self.action.type == "joint_position_delta_default" and self.action.offset != self.default_joint_pos:
            raise bad("default_joint_pos", self.default_joint_pos, f"differs from action.offset "
                      f"{self.action.offset}, the pose the graph adds (joint_position_delta_default)")
        hz = _finite(source, "control_hz", self.control_hz)
        if not 0 < hz <= MAX_CONTROL_HZ:
            raise bad("control_hz", self.control_hz, f"must be in (0, {MAX_CONTROL_HZ:g}] Hz")
        if isinstance(self.chunk_length, bool) or not isinstance(self.chunk_length, int) \
                or not 1 <= self.chunk_length <= 1000:
            raise bad("chunk_length", self.chunk_length, "must be a whole number in [1, 1000]")
        self._validate_execution(bad)
        self._validate_inputs(bad, source)
        for key, value in (("robot", self.robot), ("task", self.task)):
            if not isinstance(value, str):
                raise bad(key, value, "must be a string")
        if not isinstance(self.files, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in self.files.items()):
            raise bad("files", self.files, "must map file names to sha256 hex digests")
        return self

    def _validate_inputs(self, bad: Callable[..., ArtifactError], source: object) -> None:
        """``inputs`` known; ``vector``: observation terms of the vocabulary; ``vla``: no terms, a valid ``vla``."""
        if self.inputs not in INPUT_KINDS:
            raise bad("inputs", self.inputs, f"must be one of {INPUT_KINDS}")
        if self.inputs == "vla":
            if not isinstance(self.vla, VLAInputs):
                raise bad("vla", self.vla, "must be a mapping of the VLA inputs (inputs: vla)")
            if self.observation != []:
                raise bad("observation", self.observation, "must be [] for inputs: vla (the vla section says what "
                          "the graph takes)")
            self.vla.validate(bad)
            return
        if self.vla is not None:
            raise bad("vla", self.vla, "must be absent for inputs: vector")
        if not isinstance(self.observation, list) or not self.observation:
            raise bad("observation", self.observation, "must be a non-empty list of terms")
        A = self.action_dim
        for i, term in enumerate(self.observation):
            if not isinstance(term.name, str) or term.name not in OBSERVATION_TERMS:
                raise bad(f"observation[{i}].name", term.name,
                          f"not a real-robot quantity; known terms: {sorted(OBSERVATION_TERMS)}")
            expected = A if term.name in ("joint_pos", "joint_vel", "last_action") else TERM_SIZES.get(term.name, 3)
            if isinstance(term.size, bool) or term.size != expected:
                raise bad(f"observation[{i}].size", term.size, f"term {term.name!r} has {expected} values")
            _finite(source, f"observation[{i}].scale", term.scale)

    def _validate_execution(self, bad: Callable[..., ArtifactError]) -> None:
        """``chunk_execution``: a known mode, ``execute_len`` in ``[1, H]``, ``ensemble_decay`` finite and >= 0."""
        ex = self.chunk_execution
        if not isinstance(ex, ChunkExecution):
            raise bad("chunk_execution", ex, "must be a mapping {mode, execute_len, ensemble_decay}")
        if ex.mode not in CHUNK_MODES:
            raise bad("chunk_execution.mode", ex.mode, f"must be one of {CHUNK_MODES}")
        if isinstance(ex.execute_len, bool) or not isinstance(ex.execute_len, int) \
                or not 1 <= ex.execute_len <= self.chunk_length:
            raise bad("chunk_execution.execute_len", ex.execute_len,
                      f"must be a whole number in [1, chunk_length={self.chunk_length}] (actions played per inference)")
        decay = ex.ensemble_decay
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not math.isfinite(decay) or decay < 0:
            raise bad("chunk_execution.ensemble_decay", decay,
                      "must be a finite number >= 0 (m in w_i = exp(-m i), i = 0 the oldest prediction)")

    def to_dict(self) -> dict[str, Any]:
        """Plain-YAML form, ``schema_version`` first, then the field order."""
        data = asdict(self)
        if data["vla"] is None:
            del data["vla"]
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: Any, source: object = META_FILE) -> PolicyMeta:
        """Parse and validate the :meth:`to_dict` form; a missing or unknown key is an error naming it."""
        if not isinstance(data, dict):
            raise ArtifactError("must be a mapping of the PolicyMeta fields (the file is empty or not a "
                                "policy.yaml)", file=source, value=data, fix=REEXPORT)
        _check_keys(source, "", data, cls)
        data = dict(data)
        action = data["action"]
        if not isinstance(action, dict):
            raise ArtifactError("must be a mapping", file=source, key="action", value=action, fix=REEXPORT)
        _check_keys(source, "action.", action, ActionSpec)
        data["action"] = ActionSpec(**action)
        execution = data.get("chunk_execution")
        if execution is not None:
            if not isinstance(execution, dict):
                raise ArtifactError("must be a mapping {mode, execute_len, ensemble_decay}", file=source,
                                    key="chunk_execution", value=execution, fix=REEXPORT)
            _check_keys(source, "chunk_execution.", execution, ChunkExecution)
            data["chunk_execution"] = ChunkExecution(**execution)
        vla = data.get("vla")
        if vla is not None:
            if not isinstance(vla, dict):
                raise ArtifactError("must be a mapping of the VLA inputs", file=source, key="vla", value=vla,
                                    fix=REEXPORT)
            _check_keys(source, "vla.", vla, VLAInputs)
            data["vla"] = VLAInputs(**vla)
        terms = data["observation"]
        if not isinstance(terms, list):
            raise ArtifactError("must be a list of {name, size, scale}", file=source, key="observation",
                                value=terms, fix=REEXPORT)
        parsed = []
        for i, term in enumerate(terms):
            if not isinstance(term, dict):
                raise ArtifactError("must be a mapping {name, size, scale}", file=source, key=f"observation[{i}]",
                                    value=term, fix=REEXPORT)
            _check_keys(source, f"observation[{i}].", term, ObservationTerm)
            parsed.append(ObservationTerm(**term))
        data["observation"] = parsed
        return cls(**data).validate(source)


def _check_keys(source: object, prefix: str, data: dict, kind: type) -> None:
    """Refuse a missing required field or an unknown key of the dataclass ``kind``, naming it."""
    fields = dataclasses.fields(kind)
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for name in required:
        if name not in data:
            raise ArtifactError("missing", file=source, key=f"{prefix}{name}", fix=REEXPORT)
    unknown = sorted(str(k) for k in set(data) - {f.name for f in fields})
    if unknown:
        raise ArtifactError("unknown key", file=source, key=f"{prefix}{unknown[0]}", fix=REEXPORT)


def _finite(source: object, key: str, value: Any) -> float:
    """``value`` as a float if it is a finite number (not a bool, not a string), else ArtifactError."""
    return check_finite(value, file=source, key=key, fix=REEXPORT, error=ArtifactError)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_meta(meta: PolicyMeta, out_dir: str | Path) -> Path:
    """Validate and write ``out_dir/policy.yaml`` atomically; return its path."""
    meta.validate()
    path = Path(out_dir) / META_FILE
    text = yaml.safe_dump(meta.to_dict(), sort_keys=False, default_flow_style=None, width=110)
    write_atomic(path, text.encode())
    return path


def write_manifest(out_dir: str | Path, names: list[str]) -> Path:
    """Write ``out_dir/manifest.json``: the sha256 of each named file (policy.yaml among them), last."""
    out_dir = Path(out_dir)
    files = {name: sha256_file(out_dir / name) for name in sorted(names)}
    text = json.dumps({"manifest_version": MANIFEST_VERSION, "files": files}, indent=1) + "\n"
    path = out_dir / MANIFEST_FILE
    write_atomic(path, text.encode())
    return path


def verify_manifest(artifact_dir: str | Path) -> dict[str, str]:
    """Check ``manifest.json`` and every file it lists; return ``{file: sha256}``.

    Raises:
        ArtifactError: no manifest (an artifact from before manifests: re-export), a malformed one,
            one that does not cover policy.yaml, a listed file missing, or a file whose bytes changed
            since export (named). :func:`load_meta` then checks that it covers every graph policy.yaml lists.
    """
    artifact_dir = Path(artifact_dir)
    path = artifact_dir / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactError("missing: every file of an artifact must be covered by checksums before it can "
                            "steer a robot (artifacts exported before manifests have none)", file=path, fix=REEXPORT)
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"not valid JSON ({exc})", file=path, fix=REEXPORT) from exc
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ArtifactError("must hold {manifest_version, files: {name: sha256}}", file=path, key="files",
                            value=files, fix=REEXPORT)
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise ArtifactError(f"not supported (this robot_rl reads {MANIFEST_VERSION})", file=path,
                            key="manifest_version", value=data.get("manifest_version"), fix=REEXPORT)
    if META_FILE not in files:
        raise ArtifactError(f"does not cover {META_FILE}", file=path, key="files", value=sorted(files), fix=REEXPORT)
    for name, digest in files.items():
        file = artifact_dir / name
        if Path(name).name != name:
            raise ArtifactError("must name files of the artifact directory", file=path, key="files", value=name,
                                fix=REEXPORT)
        if not file.is_file():
            raise ArtifactError(f"is listed in {MANIFEST_FILE} but missing", file=file,
                                fix="copy the whole artifact directory")
        if sha256_file(file) != digest:
            raise ArtifactError(f"does not match its sha256 in {MANIFEST_FILE}: the file changed after export "
                                "(edited, truncated or corrupted)", file=file,
                                fix=f"restore the exported file or {REEXPORT}")
    return files


def load_meta(artifact_dir: str | Path) -> PolicyMeta:
    """Verify the manifest, then read and validate ``artifact_dir/policy.yaml``.

    Raises:
        ArtifactError: naming the file, key and value (see :func:`verify_manifest`, :meth:`PolicyMeta.validate`).
    """
    artifact_dir = Path(artifact_dir)
    path = artifact_dir / META_FILE
    if not path.is_file():
        raise ArtifactError(
            "not found: a policy artifact is a directory written by robot_rl.export.export_policy "
            f"(policy.yaml + policy.onnx + {MANIFEST_FILE})", file=path, fix="pass the artifact directory")
    manifest = verify_manifest(artifact_dir)
    try:
        raw = yaml.safe_load(path.read_text())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ArtifactError(f"not valid YAML ({exc})", file=path, fix=REEXPORT) from exc
    meta = PolicyMeta.from_dict(raw, source=path)
    for name, digest in meta.files.items():
        if manifest.get(name) != digest:
            raise ArtifactError(f"sha256 of {name} differs from {MANIFEST_FILE}'s (the files come from different "
                                "exports)", file=path, key=f"files.{name}", value=digest, fix=REEXPORT)
    return meta


def check_joint_order(meta: PolicyMeta, robot_joint_names: list[str]) -> None:
    """Refuse a robot whose joints differ from the artifact's, in name or in order.

    Raises:
        ArtifactError: naming the first differing position, the missing and the extra joints.
    """
    if list(robot_joint_names) == list(meta.joint_names):
        return
    missing = [j for j in meta.joint_names if j not in robot_joint_names]
    extra = [j for j in robot_joint_names if j not in meta.joint_names]
    first = next(
        (i for i, (a, b) in enumerate(zip(meta.joint_names, robot_joint_names, strict=False)) if a != b),
        min(len(meta.joint_names), len(robot_joint_names)),
    )
    raise ArtifactError(
        f"joint mismatch between the policy ({meta.robot}, {meta.action_dim} joints) and the robot "
        f"({len(robot_joint_names)} joints): first difference at index {first}; missing on the robot: "
        f"{missing}; not in the policy: {extra}. Export the policy for this robot's "
        f"hardware/<robot>/robot.yaml joint order (the runtime reorders JointState messages by name, "
        f"but the policy's joint set and action order must match the robot configuration)."
    )
