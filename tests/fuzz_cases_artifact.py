"""Fuzz cases of kind ``artifact``: a broken policy artifact handed to ``deploy check --robot so101``
and to ``eval --episodes 1``.

Each case copies the good artifact (policy.yaml + policy.onnx + policy.pt + manifest.json) and breaks
it. Two families:

- tampering: a file changed after export and the manifest left as it was (must be caught by the
  checksums, naming the file);
- resealed: the broken file with checksums recomputed as an exporter would, so the check behind the
  checksums (policy.yaml values, ONNX I/O, the robot's joints and default pose) must catch it.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fuzz_harness import MISSING, FuzzCase, GoodInputs, set_key

NAN, INF = math.nan, math.inf


def _copy(case_dir: Path, good: GoodInputs) -> Path:
    art = case_dir / "policy"
    shutil.copytree(good.artifact, art)
    return art


def _argv(art: Path, command: str) -> list[str]:
    if command == "eval":
        return ["eval", str(art), "--episodes", "1", "--num-envs", "1"]
    return ["deploy", "check", str(art), "--robot", "so101", "--runs", "1"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reseal(art: Path) -> None:
    """Recompute the checksums as export does: policy.yaml's ``files`` (if readable), then manifest.json."""
    meta_path = art / "policy.yaml"
    try:
        meta = yaml.safe_load(meta_path.read_text())
    except yaml.YAMLError:
        meta = None
    if isinstance(meta, dict) and isinstance(meta.get("files"), dict):
        meta["files"] = {name: _sha(art / name) for name in meta["files"] if (art / name).is_file()}
        meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    names = sorted(p.name for p in art.iterdir() if p.is_file() and p.name != "manifest.json")
    manifest = {"manifest_version": 1, "files": {n: _sha(art / n) for n in names}}
    (art / "manifest.json").write_text(json.dumps(manifest))






def _meta_case(name: str, edit: Callable[[dict], None], expect: tuple[str, ...], command: str = "check",
               sealed: bool = True) -> FuzzCase:
    """policy.yaml changed by ``edit(data)``; resealed unless ``sealed`` is False (tampering)."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        art = _copy(case_dir, good)
        data = yaml.safe_load((art / "policy.yaml").read_text())
        edit(data)
        (art / "policy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        if sealed:
            reseal(art)
        return _argv(art, command)

    return FuzzCase(f"artifact/{name}", "artifact", make, expect=("policy.yaml", *expect))


def _value_case(dotted: str, value: Any, key: str, command: str = "check") -> FuzzCase:
    shown = "missing" if value is MISSING else repr(value)
    return _meta_case(f"{dotted}={shown}@{command}", lambda d: set_key(d, dotted, value), (key,), command)


def _file_case(name: str, change: Callable[[Path], None], expect: tuple[str, ...], command: str = "check",
               sealed: bool = True) -> FuzzCase:
    """The artifact directory changed by ``change(art)``; resealed unless ``sealed`` is False."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        art = _copy(case_dir, good)
        change(art)
        if sealed:
            reseal(art)
        return _argv(art, command)

    return FuzzCase(f"artifact/{name}", "artifact", make, expect=expect)


def replace_onnx(art: Path, width: int | None = None, input_name: str = "obs") -> None:
    """Replace policy.onnx by a linear graph ``[B, D] -> [B, width]`` (default: the right width)."""
    import torch

    meta = yaml.safe_load((art / "policy.yaml").read_text())
    D = sum(t["size"] for t in meta["observation"])
    width = width or len(meta["joint_names"]) * meta["chunk_length"]
    buffer = io.BytesIO()
    torch.onnx.export(torch.nn.Linear(D, width), (torch.zeros(1, D),), buffer, input_names=[input_name],
                      output_names=["action"], dynamic_axes={input_name: {0: "batch"}, "action": {0: "batch"}},
                      opset_version=17, dynamo=False)
    (art / "policy.onnx").write_bytes(buffer.getvalue())


def _shift_default(data: dict, both: bool) -> None:
    data["default_joint_pos"][1] += 0.2
    if both:
        data["action"]["offset"][1] += 0.2


VALUES = [
    ("control_hz", NAN, "control_hz", "check"),
    ("control_hz", INF, "control_hz", "eval"),
    ("control_hz", 1e6, "control_hz", "check"),
    ("control_hz", 0, "control_hz", "eval"),
    ("control_hz", -25.0, "control_hz", "check"),
    ("control_hz", "fast", "control_hz", "check"),
    ("control_hz", MISSING, "control_hz", "eval"),
    ("default_joint_pos.0", NAN, "default_joint_pos[0]", "check"),
    ("default_joint_pos", [0.0, 0.0], "default_joint_pos", "check"),
    ("action.scale.1", NAN, "action.scale[1]", "check"),
    ("action.scale.0", 0.0, "action.scale[0]", "eval"),
    ("action.scale", "1.0", "action.scale", "check"),
    ("action.offset.2", INF, "action.offset[2]", "check"),
    ("action.clip_low", NAN, "action.clip_low", "check"),
    ("action.clip_low", 2.0, "action.clip_high", "eval"),
    ("action.clip_high", "one", "action.clip_high", "check"),
    ("action.type", "joint_torque", "action.type", "check"),
    ("action", MISSING, "action", "check"),
    ("chunk_length", 0, "chunk_length", "check"),
    ("chunk_length", 1.5, "chunk_length", "eval"),
    ("chunk_execution", "open_loop", "chunk_execution", "check"),
    ("chunk_execution.mode", "closed_loop", "chunk_execution.mode", "check"),
    ("chunk_execution.mode", MISSING, "chunk_execution.mode", "eval"),
    ("chunk_execution.execute_len", 0, "chunk_execution.execute_len", "check"),
    ("chunk_execution.execute_len", 2, "chunk_execution.execute_len", "eval"),  # > chunk_length 1
    ("chunk_execution.execute_len", True, "chunk_execution.execute_len", "check"),
    ("chunk_execution.ensemble_decay", NAN, "chunk_execution.ensemble_decay", "check"),
    ("chunk_execution.ensemble_decay", INF, "chunk_execution.ensemble_decay", "eval"),
    ("chunk_execution.ensemble_decay", -0.5, "chunk_execution.ensemble_decay", "check"),
    ("chunk_execution.ensemble_decay", "0.01", "chunk_execution.ensemble_decay", "check"),
    ("joint_names", "shoulder_pan", "joint_names", "check"),
    ("observation.0.scale", NAN, "observation[0].scale", "check"),
    ("observation.0.size", "6", "observation[0].size", "check"),
    ("observation.0.name", "lidar", "observation[0].name", "eval"),
    ("observation", MISSING, "observation", "check"),
    ("schema_version", 99, "schema_version", "check"),
    ("files", ["policy.onnx"], "files", "check"),
]


def cases() -> list[FuzzCase]:
    """The artifact corpus."""
    out = [_value_case(dotted, value, key, command) for dotted, value, key, command in VALUES]
    out += [
        _meta_case("extra_key", lambda d: d.update(speed=2.0), ("speed",)),
        _meta_case("chunk_execution_extra_key", lambda d: d["chunk_execution"].update(decay=0.01),
                   ("chunk_execution.decay",)),
        _meta_case("default_joint_pos_edited@check", lambda d: _shift_default(d, True), ("default_joint_pos[1]",)),
        _meta_case("default_joint_pos_edited@eval", lambda d: _shift_default(d, True), ("default_joint_pos[1]",),
                   "eval"),
        _meta_case("default_joint_pos_not_offset", lambda d: _shift_default(d, False), ("default_joint_pos",)),
        _meta_case("default_outside_limits", lambda d: (d["default_joint_pos"].__setitem__(0, 3.0),
                                                        d["action"]["offset"].__setitem__(0, 3.0)),
                   ("default_joint_pos[0]", "outside its limits")),
        _meta_case("tampered_policy_yaml@check", lambda d: d.update(control_hz=1e6), ("manifest.json",),
                   sealed=False),
        _meta_case("tampered_policy_yaml@eval", lambda d: d["action"]["scale"].__setitem__(0, 3.0),
                   ("manifest.json",), "eval", sealed=False),
        _file_case("tampered_onnx_bytes", lambda a: (a / "policy.onnx").write_bytes(
            (a / "policy.onnx").read_bytes() + b"\0"), ("policy.onnx", "manifest.json"), sealed=False),
        _file_case("tampered_pt_bytes@eval", lambda a: (a / "policy.pt").write_bytes(b"x"),
                   ("policy.pt", "manifest.json"), "eval", sealed=False),
        _file_case("garbage_onnx", lambda a: (a / "policy.onnx").write_bytes(b"not an onnx graph" * 10),
                   ("policy.onnx", "ONNX")),
        _file_case("zero_byte_onnx@eval", lambda a: (a / "policy.onnx").write_bytes(b""), ("policy.onnx", "ONNX"),
                   "eval"),
        _file_case("onnx_output_width_7", lambda a: replace_onnx(a, width=7), ("policy.onnx", "action")),
        _file_case("onnx_output_width_7@eval", lambda a: replace_onnx(a, width=7), ("policy.onnx", "action"), "eval"),
        _file_case("onnx_input_name", lambda a: replace_onnx(a, input_name="observation"), ("policy.onnx", "obs")),
        _file_case("empty_policy_yaml", lambda a: (a / "policy.yaml").write_text(""), ("policy.yaml", "mapping")),
        _file_case("policy_yaml_not_yaml", lambda a: (a / "policy.yaml").write_text("control_hz: [1,\n"),
                   ("policy.yaml", "YAML")),
        _file_case("missing_manifest", lambda a: (a / "manifest.json").unlink(), ("manifest.json", "re-export"),
                   sealed=False),
        _file_case("missing_manifest@eval", lambda a: (a / "manifest.json").unlink(), ("manifest.json",), "eval",
                   sealed=False),
        _file_case("manifest_not_json", lambda a: (a / "manifest.json").write_text("{files"), ("manifest.json",),
                   sealed=False),
        _file_case("manifest_without_policy_yaml", lambda a: _drop_from_manifest(a, "policy.yaml"),
                   ("manifest.json", "policy.yaml"), sealed=False),
        _file_case("missing_onnx", lambda a: (a / "policy.onnx").unlink(), ("policy.onnx", "missing"), sealed=False),
        _file_case("missing_policy_yaml", lambda a: (a / "policy.yaml").unlink(), ("policy.yaml", "not found"),
                   sealed=False),
        _file_case("files_sha_differs_from_manifest", _wrong_files_sha, ("policy.yaml", "files.policy.onnx"),
                   sealed=False),
    ]
    return out


def _drop_from_manifest(art: Path, name: str) -> None:
    manifest = json.loads((art / "manifest.json").read_text())
    del manifest["files"][name]
    (art / "manifest.json").write_text(json.dumps(manifest))


def _wrong_files_sha(art: Path) -> None:
    """policy.yaml lists another sha256 for policy.onnx than the manifest (then the manifest is resealed)."""
    data = yaml.safe_load((art / "policy.yaml").read_text())
    data["files"]["policy.onnx"] = "0" * 64
    (art / "policy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"]["policy.yaml"] = _sha(art / "policy.yaml")
    (art / "manifest.json").write_text(json.dumps(manifest))
