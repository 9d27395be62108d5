"""The policy artifact schema (DESIGN.md, contract 3): ``policy.yaml`` beside ``policy.onnx``/``policy.pt``.

An artifact directory needs nothing from training to run::

    policy.onnx   input "obs" float32 [B, D]: the env's "policy" observation (every term already
                  multiplied by its scale); output "action" float32 [B, H*A]: joint targets in robot
                  units (normalisation, clip, scale and offset are inside the graph).
    policy.pt     TorchScript with the same input and output.
    policy.yaml   :class:`PolicyMeta`, written last, so a directory with a policy.yaml is complete.

Only numpy and PyYAML here: the ROS nodes import this module on a robot computer without torch.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCHEMA_VERSION = 1
META_FILE = "policy.yaml"
ONNX_FILE = "policy.onnx"
TORCHSCRIPT_FILE = "policy.pt"

OBSERVATION_TERMS = {
    "joint_pos": "q - default, per joint in action order [A]",
    "joint_vel": "qdot, per joint in action order [A]",
    "base_ang_vel": "IMU gyro in the body frame [3]",
    "projected_gravity": "unit gravity vector in the IMU frame [3]",
    "velocity_command": "commanded (vx, vy, yaw rate) [3]",
    "target_pos": "target position in the robot base frame [3]",
    "last_action": "previous raw policy action in [-1, 1] [A]",
}
"""The policy observation vocabulary: what a real robot publishes (contract 1)."""

ACTION_TYPES = ("joint_position_delta_default", "joint_position")
"""Both are ``target = offset + scale * clip(a)``: ``joint_position_delta_default`` has offset =
default pose; ``joint_position`` maps [-1, 1] onto the joint range (offset = mid-range, scale =
half-range), as the simulator does."""


class ArtifactError(ValueError):
    """A policy artifact that is incomplete, inconsistent or made for another robot."""


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
        task: the training task, e.g. ``so101_reach``.
        training: summary (algorithm, steps, eval success, ...), free-form.
        config: the resolved source config, free-form.
        files: ``{file name: sha256}`` of the exported graphs, checked on load.
        schema_version: :data:`SCHEMA_VERSION`.
    """

    robot: str
    joint_names: list[str]
    default_joint_pos: list[float]
    observation: list[ObservationTerm]
    action: ActionSpec
    control_hz: float
    chunk_length: int = 1
    task: str = ""
    training: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def action_dim(self) -> int:
        """``A``, joints per action."""
        return len(self.joint_names)

    @property
    def observation_dim(self) -> int:
        """``D``, the sum of the term sizes."""
        return sum(t.size for t in self.observation)

    def validate(self) -> PolicyMeta:
        """Raise :class:`ArtifactError` naming the first inconsistent field; return ``self``."""
        A = self.action_dim
        if self.schema_version != SCHEMA_VERSION:
            raise ArtifactError(
                f"policy.yaml schema_version {self.schema_version} is not supported (this robot_rl "
                f"reads {SCHEMA_VERSION}); re-export the policy with this version of robot_rl."
            )
        if A == 0 or len(set(self.joint_names)) != A:
            raise ArtifactError(f"joint_names must be non-empty and unique, got {self.joint_names}.")
        for key, values in (
            ("default_joint_pos", self.default_joint_pos),
            ("action.scale", self.action.scale),
            ("action.offset", self.action.offset),
        ):
            if len(values) != A:
                raise ArtifactError(f"{key} has {len(values)} values for {A} joints {self.joint_names}.")
        if self.action.type not in ACTION_TYPES:
            raise ArtifactError(f"action.type {self.action.type!r} is not one of {ACTION_TYPES}.")
        if any(s == 0.0 for s in self.action.scale):
            raise ArtifactError(f"action.scale {self.action.scale} has a zero; every joint needs a scale.")
        if not self.action.clip_low < self.action.clip_high:
            raise ArtifactError(f"action clip [{self.action.clip_low}, {self.action.clip_high}] is empty.")
        if self.control_hz <= 0 or self.chunk_length < 1:
            raise ArtifactError(
                f"control_hz={self.control_hz} must be > 0 and chunk_length={self.chunk_length} >= 1."
            )
        for term in self.observation:
            if term.name not in OBSERVATION_TERMS:
                raise ArtifactError(
                    f"observation term {term.name!r} is not a real-robot quantity; "
                    f"known terms: {sorted(OBSERVATION_TERMS)}."
                )
            expected = A if term.name in ("joint_pos", "joint_vel", "last_action") else 3
            if term.size != expected:
                raise ArtifactError(
                    f"observation term {term.name!r} has size {term.size}, expected {expected}."
                )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-YAML form, ``schema_version`` first, then the field order."""
        data = asdict(self)
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyMeta:
        """Parse and validate the :meth:`to_dict` form; unknown keys are an error."""
        data = dict(data)
        try:
            data["observation"] = [ObservationTerm(**t) for t in data["observation"]]
            data["action"] = ActionSpec(**data["action"])
            return cls(**data).validate()
        except (KeyError, TypeError) as exc:
            raise ArtifactError(f"policy.yaml does not match the PolicyMeta schema: {exc}") from exc


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


def load_meta(artifact_dir: str | Path, verify_files: bool = True) -> PolicyMeta:
    """Read and validate ``artifact_dir/policy.yaml``; with ``verify_files``, check the sha256 sums."""
    artifact_dir = Path(artifact_dir)
    path = artifact_dir / META_FILE
    if not path.is_file():
        raise ArtifactError(
            f"{path} not found: a policy artifact is a directory written by robot_rl.export.export_policy "
            f"(policy.yaml + policy.onnx)."
        )
    meta = PolicyMeta.from_dict(yaml.safe_load(path.read_text()))
    if verify_files:
        for name, digest in meta.files.items():
            file = artifact_dir / name
            if not file.is_file():
                raise ArtifactError(f"{file} is listed in policy.yaml but missing; copy the whole directory.")
            if sha256_file(file) != digest:
                raise ArtifactError(f"{file} does not match its sha256 in policy.yaml; re-export the policy.")
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
