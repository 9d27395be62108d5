"""Checkpoints: safetensors for tensors + YAML for everything else, written atomically.

A checkpoint is a directory ``<run>/checkpoints/step_<env_steps:012d>/`` holding
``state.safetensors`` (every tensor, keyed by its path in the state tree) and ``state.yaml``
(the tree itself with tensors replaced by ``{__tensor__: key}``, plus the schema version). The
directory is assembled under a temporary name and renamed into place, so a checkpoint that exists
is complete, whenever the process is killed (``kill -9`` included). Loading never unpickles.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file, save_file

SCHEMA_VERSION = 1
TENSORS_FILE = "state.safetensors"
TREE_FILE = "state.yaml"
PREFIX = "step_"
_TENSOR = "__tensor__"
_SCALARS = (int, float, str, bool, type(None))


def flatten(tree: Any, path: str = "") -> tuple[Any, dict[str, torch.Tensor]]:
    """Split a nested state into a YAML-safe skeleton and a flat ``{path: tensor}`` dict.

    Dicts (str or int keys), lists/tuples (saved as lists), tensors and plain scalars are allowed;
    anything else raises ``TypeError`` naming its path.
    """
    if isinstance(tree, torch.Tensor):
        key = path or "root"
        return {_TENSOR: key}, {key: tree}
    if isinstance(tree, dict):
        skeleton, tensors = {}, {}
        for k, v in tree.items():
            if not isinstance(k, str | int) or isinstance(k, bool):
                raise TypeError(f"checkpoint key {k!r} at {path or 'root'} must be str or int")
            s, t = flatten(v, f"{path}/{k}" if path else str(k))
            skeleton[k] = s
            tensors.update(t)
        return skeleton, tensors
    if isinstance(tree, list | tuple):
        skeleton, tensors = [], {}
        for i, v in enumerate(tree):
            s, t = flatten(v, f"{path}/{i}" if path else str(i))
            skeleton.append(s)
            tensors.update(t)
        return skeleton, tensors
    if isinstance(tree, _SCALARS):
        return tree, {}
    raise TypeError(f"cannot checkpoint {type(tree).__name__} at {path or 'root'}; use tensors or scalars")


def unflatten(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_TENSOR}:
            return tensors[skeleton[_TENSOR]]
        return {k: unflatten(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [unflatten(v, tensors) for v in skeleton]
    return skeleton


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    """Write ``state`` as checkpoint ``step`` of ``run_dir`` atomically; keep the newest ``keep``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    skeleton, tensors = flatten(state)
    final = root / f"{PREFIX}{step:012d}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp_", dir=root))
    try:
        # clone(): safetensors refuses tensors that share storage (e.g. views of one buffer).
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, tmp / TENSORS_FILE)
        with open(tmp / TREE_FILE, "w") as f:
            yaml.safe_dump({"schema_version": SCHEMA_VERSION, "step": step, "state": skeleton}, f)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of ``run_dir``, oldest first (temporary directories are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / TREE_FILE).is_file())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[int, dict[str, Any]]:
    """Read a checkpoint directory; returns ``(step, state)`` with tensors on ``device``."""
    path = Path(path)
    if not (path / TREE_FILE).is_file():
        raise FileNotFoundError(
            f"{path} is not a checkpoint (no {TREE_FILE}); expected <run>/checkpoints/{PREFIX}*"
        )
    with open(path / TREE_FILE) as f:
        doc = yaml.safe_load(f)
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has checkpoint schema {doc.get('schema_version')}, this code reads {SCHEMA_VERSION}"
        )
    tensors = load_file(path / TENSORS_FILE, device=str(device))
    return int(doc["step"]), unflatten(doc["state"], tensors)
