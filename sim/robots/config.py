"""``hardware/<robot>/robot.yaml``: what a physical robot is (DESIGN.md, contract 2).

:func:`load_robot` reads and validates one file; every error names the file, the key and the fix.
Every number is checked finite and in range here (NaN or infinity would switch a safety rule off):
``lower < upper``, the default inside them, ``velocity``/``effort``/``kp > 0``, ``kd >= 0``, the policy
rate in ``(0, 1000]`` Hz, ``physics_dt`` in ``(0, 0.1]`` s dividing the control period (decimation a whole
number >= 1), ``max_step_change > 0``, ``stale_state_timeout`` in ``(0, 10]`` s, ``soft_start_s`` in ``[0, 60]``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCHEMA_VERSION = 1
KINDS = ("arm", "humanoid", "quadruped")
ACTION_TYPES = ("joint_position_delta_default", "joint_position", "joint_torque")
ESTOP_MODES = ("hold", "damp")
MAX_POLICY_HZ = 1000.0
MAX_STALE_TIMEOUT_S = 10.0
"""Longest stale-state timeout accepted: beyond it the watchdog would be off in all but name."""
MAX_SOFT_START_S = 60.0


class RobotConfigError(ValueError):
    """A robot.yaml that cannot describe a robot; the message names file, key and fix."""


def hardware_dir() -> Path:
    """Directory holding ``<robot>/robot.yaml`` files: ``$ROBOT_RL_HARDWARE`` or the repo's ``hardware/``."""
    env = os.environ.get("ROBOT_RL_HARDWARE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "hardware"


@dataclass(frozen=True)
class JointSpec:
    """One actuated joint of the real robot, in the robot's command order."""

    name: str
    lower: float
    upper: float
    velocity: float
    effort: float
    default: float
    kp: float
    kd: float


@dataclass(frozen=True)
class ControlSpec:
    """Control timing and the meaning of a policy action."""

    policy_hz: float
    physics_dt: float
    action_type: str = "joint_position_delta_default"
    action_scale: float = 0.5
    decimation: int = field(init=False)

    def __post_init__(self) -> None:
        ratio = 1.0 / (self.policy_hz * self.physics_dt)
        object.__setattr__(self, "decimation", round(ratio))

    @property
    def dt(self) -> float:
        """Control period in seconds (physics_dt x decimation)."""
        return self.physics_dt * self.decimation


@dataclass(frozen=True)
class SafetySpec:
    """Limits the deployment safety layer enforces."""

    max_step_change: float = 0.1
    stale_state_timeout: float = 0.2
    soft_start_s: float = 2.0
    estop: str = "hold"


@dataclass(frozen=True)
class ModelSpec:
    """Where the MJCF comes from and how to prepare it."""

    sources: tuple[dict[str, str], ...]
    collision: str = "all"
    floating_base: str | None = None
    base_body: str | None = None


@dataclass(frozen=True)
class RobotConfig:
    """A validated robot.yaml. ``path`` is the file it came from."""

    name: str
    kind: str
    model: ModelSpec
    joints: tuple[JointSpec, ...]
    control: ControlSpec
    sites: dict[str, Any]
    ros: dict[str, Any]
    safety: SafetySpec
    path: Path
    schema_version: int = SCHEMA_VERSION

    @property
    def joint_names(self) -> list[str]:
        """Joint names in command order."""
        return [j.name for j in self.joints]

    @property
    def num_joints(self) -> int:
        """Number of actuated joints."""
        return len(self.joints)

    def as_dict(self) -> dict[str, Any]:
        """Plain-data form (for YAML, parameter files and artifacts)."""
        out = dataclasses.asdict(self)
        out["path"] = str(self.path)
        out["model"]["sources"] = list(self.model.sources)
        out["joints"] = [dataclasses.asdict(j) for j in self.joints]
        return out


_TOP_KEYS = {"schema_version", "name", "kind", "model", "joints", "control", "sites", "ros", "safety"}
_REQUIRED_TOP = ("name", "kind", "model", "joints", "control")
_JOINT_KEYS = {f.name for f in dataclasses.fields(JointSpec)}
_CONTROL_KEYS = {"policy_hz", "physics_dt", "action_type", "action_scale"}
_SAFETY_KEYS = {f.name for f in dataclasses.fields(SafetySpec)}
_MODEL_KEYS = {"sources", "collision", "floating_base", "base_body"}
_SOURCE_KINDS = ("package", "assets", "menagerie", "path")


def _err(path: Path, key: str, problem: str, fix: str) -> RobotConfigError:
    return RobotConfigError(f"{path}: key '{key}': {problem}. Fix: {fix}")


def _check_keys(path: Path, where: str, got: dict, allowed: set[str]) -> None:
    unknown = sorted(set(got) - allowed)
    if unknown:
        raise _err(path, f"{where}{unknown[0]}", "unknown key",
                   f"remove it or use one of {sorted(allowed)}")


def _number(path: Path, key: str, value: Any, low: float | None = None, high: float | None = None,
            strict: bool = False, fix: str = "write a plain finite number") -> float:
    """``value`` as a float if it is a finite number in ``[low, high]`` (``(low, high]`` when ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _err(path, key, f"expected a number, got {value!r}", fix)
    if not math.isfinite(value):
        raise _err(path, key, f"must be a finite number, got {value!r} (NaN or infinity switches safety "
                   "rules off)", fix)
    if low is not None and (value < low or (strict and value == low)):
        raise _err(path, key, f"must be {'>' if strict else '>='} {low:g}, got {value!r}", fix)
    if high is not None and value > high:
        raise _err(path, key, f"must be <= {high:g}, got {value!r}", fix)
    return float(value)


def _parse_joint(path: Path, i: int, raw: Any) -> JointSpec:
    where = f"joints[{i}]"
    if not isinstance(raw, dict):
        raise _err(path, where, f"expected a mapping, got {raw!r}", "write {name: ..., lower: ..., ...}")
    _check_keys(path, f"{where}.", raw, _JOINT_KEYS)
    missing = [k for k in ("name", "lower", "upper", "velocity", "effort", "default", "kp", "kd") if k not in raw]
    if missing:
        raise _err(path, f"{where}.{missing[0]}", "missing", f"add {missing[0]} for joint {raw.get('name')!r}")
    if not isinstance(raw["name"], str) or not raw["name"]:
        raise _err(path, f"{where}.name", f"expected a joint name, got {raw['name']!r}", "write the joint's name")
    values = {k: _number(path, f"{where}.{k}", raw[k]) for k in _JOINT_KEYS - {"name"}}
    joint = JointSpec(name=raw["name"], **values)
    if not joint.lower < joint.upper:
        raise _err(path, f"{where}.lower", f"lower {joint.lower} is not below upper {joint.upper} "
                   f"for joint {joint.name!r}", "swap them or fix the limits")
    if not joint.lower <= joint.default <= joint.upper:
        raise _err(path, f"{where}.default", f"default {joint.default} is outside [{joint.lower}, "
                   f"{joint.upper}] for joint {joint.name!r}", "pick a default pose inside the limits")
    for k in ("velocity", "effort", "kp"):
        if getattr(joint, k) <= 0:
            raise _err(path, f"{where}.{k}", f"must be positive for joint {joint.name!r}", "use the datasheet value")
    if joint.kd < 0:
        raise _err(path, f"{where}.kd", f"must be >= 0 for joint {joint.name!r}", "use a non-negative damping")
    return joint


def _parse_control(path: Path, raw: Any) -> ControlSpec:
    if not isinstance(raw, dict):
        raise _err(path, "control", "expected a mapping", "write control: {policy_hz: ..., physics_dt: ...}")
    _check_keys(path, "control.", raw, _CONTROL_KEYS)
    for k in ("policy_hz", "physics_dt"):
        if k not in raw:
            raise _err(path, f"control.{k}", "missing", f"add control.{k}")
    action_type = raw.get("action_type", "joint_position_delta_default")
    if action_type not in ACTION_TYPES:
        raise _err(path, "control.action_type", f"unknown action type {action_type!r}", f"use one of {ACTION_TYPES}")
    control = ControlSpec(
        policy_hz=_number(path, "control.policy_hz", raw["policy_hz"], 0.0, MAX_POLICY_HZ, strict=True,
                          fix=f"give the policy rate in Hz, in (0, {MAX_POLICY_HZ:g}]"),
        physics_dt=_number(path, "control.physics_dt", raw["physics_dt"], 0.0, 0.1, strict=True,
                           fix="give the physics step in seconds, e.g. 0.002"),
        action_type=action_type,
        action_scale=_number(path, "control.action_scale", raw.get("action_scale", 0.5), 0.0, strict=True,
                             fix="give the action scale as a positive number"),
    )
    ratio = 1.0 / (control.policy_hz * control.physics_dt)
    if abs(ratio - control.decimation) > 1e-6 or ratio < 1:
        raise _err(path, "control.policy_hz", f"1 / (policy_hz * physics_dt) = {ratio:g} is not a whole "
                   "number >= 1", "choose physics_dt so that it divides the control period")
    return control


def _parse_safety(path: Path, raw: Any) -> SafetySpec:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _err(path, "safety", f"expected a mapping, got {raw!r}", "write safety: {max_step_change: ..., ...}")
    _check_keys(path, "safety.", raw, _SAFETY_KEYS)
    default = SafetySpec()
    values = {
        "max_step_change": _number(path, "safety.max_step_change", raw.get("max_step_change", default.max_step_change),
                                   0.0, strict=True, fix="give the largest change per control step in rad, > 0"),
        "stale_state_timeout": _number(path, "safety.stale_state_timeout",
                                       raw.get("stale_state_timeout", default.stale_state_timeout), 0.0,
                                       MAX_STALE_TIMEOUT_S, strict=True,
                                       fix=f"give the watchdog timeout in seconds, in (0, {MAX_STALE_TIMEOUT_S:g}]"),
        "soft_start_s": _number(path, "safety.soft_start_s", raw.get("soft_start_s", default.soft_start_s), 0.0,
                                MAX_SOFT_START_S, fix=f"give the soft start in seconds, in [0, {MAX_SOFT_START_S:g}]"),
    }
    estop = raw.get("estop", default.estop)
    if estop not in ESTOP_MODES:
        raise _err(path, "safety.estop", f"unknown mode {estop!r}", f"use one of {ESTOP_MODES}")
    return SafetySpec(**values, estop=estop)


def _parse_model(path: Path, raw: Any) -> ModelSpec:
    if not isinstance(raw, dict) or not raw.get("sources"):
        raise _err(path, "model.sources", "missing or empty", "list at least one model source, "
                   "e.g. sources: [{assets: <robot>/<file>.xml}]")
    _check_keys(path, "model.", raw, _MODEL_KEYS)
    sources = []
    for i, src in enumerate(raw["sources"]):
        if not isinstance(src, dict) or len(src) != 1 or next(iter(src)) not in _SOURCE_KINDS:
            raise _err(path, f"model.sources[{i}]", f"bad source {src!r}",
                       f"write one of {[k + ': ...' for k in _SOURCE_KINDS]}")
        sources.append({str(k): str(v) for k, v in src.items()})
    collision = raw.get("collision", "all")
    if collision not in ("all", "floor_only"):
        raise _err(path, "model.collision", f"unknown mode {collision!r}", "use all or floor_only")
    return ModelSpec(tuple(sources), collision, raw.get("floating_base"), raw.get("base_body"))


def load_robot(name_or_path: str | os.PathLike) -> RobotConfig:
    """Load and validate a robot description.

    Args:
        name_or_path: a robot name under :func:`hardware_dir` (``"so101"``), a directory holding
            ``robot.yaml``, or the path of a yaml file.

    Raises:
        RobotConfigError: the file is missing or invalid; the message names file, key and fix.
    """
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "robot.yaml"
    elif path.suffix not in (".yaml", ".yml"):
        path = hardware_dir() / str(name_or_path) / "robot.yaml"
    if not path.is_file():
        known = sorted(p.parent.name for p in hardware_dir().glob("*/robot.yaml"))
        raise RobotConfigError(f"{path}: no such robot description. Fix: use one of {known} or a path "
                               "to a robot.yaml (set ROBOT_RL_HARDWARE for another hardware directory)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RobotConfigError(f"{path}: not valid YAML ({exc}). Fix: correct the syntax") from exc
    if not isinstance(raw, dict):
        raise _err(path, "<top>", "expected a mapping", "start from hardware/so101/robot.yaml")
    _check_keys(path, "", raw, _TOP_KEYS)
    for key in _REQUIRED_TOP:
        if key not in raw:
            raise _err(path, key, "missing", f"add {key} (see docs/robots.md)")
    version = raw.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise _err(path, "schema_version", f"version {version} is not supported", f"use {SCHEMA_VERSION}")
    if not isinstance(raw["name"], str) or not raw["name"]:
        raise _err(path, "name", f"expected the robot's name, got {raw['name']!r}", "write e.g. name: so101")
    for key in ("sites", "ros"):
        if not isinstance(raw.get(key) or {}, dict):
            raise _err(path, key, f"expected a mapping, got {raw[key]!r}", f"write {key}: {{...}}")
    if raw["kind"] not in KINDS:
        raise _err(path, "kind", f"unknown kind {raw['kind']!r}", f"use one of {KINDS}")
    if not isinstance(raw["joints"], list) or not raw["joints"]:
        raise _err(path, "joints", "missing or empty", "list the actuated joints in command order")
    joints = tuple(_parse_joint(path, i, j) for i, j in enumerate(raw["joints"]))
    names = [j.name for j in joints]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _err(path, "joints", f"joint {dup[0]!r} is listed twice", "list each joint once")
    return RobotConfig(
        name=raw["name"],
        kind=raw["kind"],
        model=_parse_model(path, raw["model"]),
        joints=joints,
        control=_parse_control(path, raw["control"]),
        sites=dict(raw.get("sites", {}) or {}),
        ros=dict(raw.get("ros", {}) or {}),
        safety=_parse_safety(path, raw.get("safety", {})),
        path=path,
        schema_version=version,
    )
