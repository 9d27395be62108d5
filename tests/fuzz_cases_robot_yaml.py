"""Fuzz cases of kind ``robot_yaml``: a broken ``hardware/<robot>/robot.yaml`` handed to the commands
that read one (``deploy check <artifact> --robot <path>`` and ``ros params <path>``).

Each case copies the good so101 robot.yaml, breaks one value (NaN, infinity, negative, zero, a string,
a missing key, a wrong type) or the file's structure, and expects exit 2 with a message naming
``robot.yaml`` and the key.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fuzz_harness import MISSING, FuzzCase, GoodInputs, set_key

NAN, INF = math.nan, math.inf




def _argv(case_dir: Path, good: GoodInputs, command: str) -> list[str]:
    path = case_dir / "robot.yaml"
    if command == "check":
        return ["deploy", "check", str(good.artifact), "--robot", str(path), "--runs", "1"]
    return ["ros", "params", str(path)]


def _value_case(dotted: str, value: Any, key: str, command: str, label: str | None = None) -> FuzzCase:
    """robot.yaml with ``dotted`` set to ``value``; the message must name ``key``."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        data = yaml.safe_load(good.robot_yaml.read_text())
        data = copy.deepcopy(data)
        set_key(data, dotted, value)
        (case_dir / "robot.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return _argv(case_dir, good, command)

    shown = label or ("missing" if value is MISSING else repr(value))
    return FuzzCase(f"robot_yaml/{dotted}={shown}", "robot_yaml", make, expect=("robot.yaml", key))


def _edit_case(name: str, edit: Callable[[dict], Any], key: str, command: str) -> FuzzCase:
    """robot.yaml whose parsed data is changed by ``edit(data)`` (which may return a replacement)."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        data = yaml.safe_load(good.robot_yaml.read_text())
        replaced = edit(data)
        (case_dir / "robot.yaml").write_text(yaml.safe_dump(data if replaced is None else replaced, sort_keys=False))
        return _argv(case_dir, good, command)

    return FuzzCase(f"robot_yaml/{name}", "robot_yaml", make, expect=("robot.yaml", key))


def _text_case(name: str, text: Callable[[str], str], key: str, command: str) -> FuzzCase:
    """robot.yaml whose text is replaced by ``text(good_text)``."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        (case_dir / "robot.yaml").write_text(text(good.robot_yaml.read_text()))
        return _argv(case_dir, good, command)

    return FuzzCase(f"robot_yaml/{name}", "robot_yaml", make, expect=("robot.yaml", key))


VALUES = [
    ("joints.0.lower", NAN, "joints[0].lower"),
    ("joints.0.upper", INF, "joints[0].upper"),
    ("joints.1.lower", -INF, "joints[1].lower"),
    ("joints.2.default", NAN, "joints[2].default"),
    ("joints.0.default", 5.0, "joints[0].default"),
    ("joints.0.kp", NAN, "joints[0].kp"),
    ("joints.0.kp", -1.0, "joints[0].kp"),
    ("joints.1.kd", INF, "joints[1].kd"),
    ("joints.1.kd", -0.5, "joints[1].kd"),
    ("joints.3.velocity", 0.0, "joints[3].velocity"),
    ("joints.3.effort", -2.0, "joints[3].effort"),
    ("joints.4.velocity", "fast", "joints[4].velocity"),
    ("joints.5.kp", [1.0, 2.0], "joints[5].kp"),
    ("joints.0.lower", MISSING, "joints[0].lower"),
    ("joints.2.upper", -3.0, "joints[2].lower"),  # below lower
    ("joints.0.name", 5, "joints[0].name"),
    ("control.policy_hz", NAN, "control.policy_hz"),
    ("control.policy_hz", 0, "control.policy_hz"),
    ("control.policy_hz", "25Hz", "control.policy_hz"),
    ("control.policy_hz", 1e6, "control.policy_hz"),
    ("control.policy_hz", MISSING, "control.policy_hz"),
    ("control.physics_dt", -0.004, "control.physics_dt"),
    ("control.physics_dt", INF, "control.physics_dt"),
    ("control.physics_dt", 0.003, "control.policy_hz"),  # decimation 13.3: not a whole number
    ("control.action_scale", NAN, "control.action_scale"),
    ("safety.stale_state_timeout", NAN, "safety.stale_state_timeout"),
    ("safety.stale_state_timeout", 0.0, "safety.stale_state_timeout"),
    ("safety.stale_state_timeout", INF, "safety.stale_state_timeout"),
    ("safety.stale_state_timeout", 1e9, "safety.stale_state_timeout"),
    ("safety.max_step_change", "fast", "safety.max_step_change"),
    ("safety.max_step_change", -0.1, "safety.max_step_change"),
    ("safety.max_step_change", NAN, "safety.max_step_change"),
    ("safety.soft_start_s", -1.0, "safety.soft_start_s"),
    ("safety.soft_start_s", NAN, "safety.soft_start_s"),
    ("safety.estop", "freeze", "safety.estop"),
    ("safety", [1, 2], "safety"),
    ("joints", {"a": 1}, "joints"),
    ("ros.command", MISSING, "ros.command"),
    ("ros.joint_states", "joint_states", "ros.joint_states"),
]


def _duplicate_joint(data: dict) -> None:
    data["joints"][1]["name"] = data["joints"][0]["name"]


def cases() -> list[FuzzCase]:
    """The robot.yaml corpus: value cases alternate between ``deploy check`` and ``ros params``."""
    out = []
    for i, (dotted, value, key) in enumerate(VALUES):
        command = "params" if dotted.startswith("ros.") or i % 2 else "check"
        out.append(_value_case(dotted, value, key, command))
    out += [
        _text_case("empty_file", lambda _: "", "<top>", "check"),
        _text_case("not_a_mapping", lambda _: "- so101\n- arm\n", "<top>", "params"),
        _text_case("truncated", lambda t: t[: t.index("{name: shoulder_pan") + 30], "YAML", "check"),
        _text_case("binary_garbage", lambda _: "\x00\x01joints: [\n", "YAML", "params"),
        _edit_case("duplicate_joint_names", _duplicate_joint, "joints", "check"),
        _edit_case("no_joints", lambda d: d.update(joints=[]), "joints", "params"),
        _edit_case("unknown_key", lambda d: d["safety"].update(stale_timeout=0.2), "safety.stale_timeout", "check"),
    ]
    return out
