"""Checkpoints: safetensors for tensors + YAML for everything else, written atomically and checksummed.

A checkpoint is a directory ``<run>/checkpoints/step_<env_steps:012d>/`` holding
``state.safetensors`` (every tensor, keyed by its path in the state tree), ``state.yaml`` (the tree
itself with tensors replaced by ``{__tensor__: key}``, plus the schema version) and ``SHA256SUMS``
(the sha256 of both, in ``sha256sum`` format, so ``sha256sum -c SHA256SUMS`` checks it by hand), written
last. The directory is assembled under a temporary name (``.tmp_*``) and renamed into place, so a
checkpoint that exists is complete whenever the process is killed (``kill -9`` included); temporary
directories a killed process left behind are removed at the next save (one writer per run directory).

:func:`load_checkpoint` verifies the checksums, parses the YAML and the tensors and refuses non-finite
values, raising :class:`CheckpointError` (a :class:`robot_rl.errors.InputError`: ``robot-rl`` exits 2)
naming the file. :func:`save_checkpoint` refuses a state with NaN or infinite values
(:class:`NonFiniteStateError`) and, when it prunes old checkpoints, never deletes the newest intact one.
Loading never unpickles.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from robot_rl.deploy.artifact import sha256_file
from robot_rl.errors import InputError

SCHEMA_VERSION = 2
"""2: with ``SHA256SUMS``. Version 1 checkpoints (no checksums) still load, with the finite-value check."""
TENSORS_FILE = "state.safetensors"
TREE_FILE = "state.yaml"
SUMS_FILE = "SHA256SUMS"
PREFIX = "step_"
TMP_PREFIX = ".tmp_"
_TENSOR = "__tensor__"
_SCALARS = (int, float, str, bool, type(None))


class CheckpointError(InputError):
    """A checkpoint that cannot be used: missing, truncated or altered files, bad YAML, non-finite values."""


class NonFiniteStateError(ValueError):
    """:func:`save_checkpoint` was handed NaN or infinite values (training diverged); nothing was written."""


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
    """Inverse of :func:`flatten`; ``KeyError`` for a tensor key missing from ``tensors``."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_TENSOR}:
            return tensors[skeleton[_TENSOR]]
        return {k: unflatten(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [unflatten(v, tensors) for v in skeleton]
    return skeleton


def non_finite(skeleton: Any, tensors: dict[str, torch.Tensor], path: str = "") -> list[str]:
    """Paths of the floating-point tensors and float scalars of a flattened state holding NaN or inf."""
    bad = [k for k, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    stack = [(path, skeleton)]
    while stack:
        where, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            stack.append((f"{where}/{k}" if where else str(k), v))
        if isinstance(node, float) and not math.isfinite(node):
            bad.append(where)
    return sorted(bad)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def clean_stale_tmp(run_dir: str | Path) -> list[Path]:
    """Remove the ``checkpoints/.tmp_*`` directories a killed writer left behind; returns them."""
    root = Path(run_dir) / "checkpoints"
    stale = sorted(p for p in root.glob(f"{TMP_PREFIX}*") if p.is_dir()) if root.is_dir() else []
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    """Write ``state`` as checkpoint ``step`` of ``run_dir`` atomically; keep the newest ``keep`` (and
    always the newest intact one). Raises :class:`NonFiniteStateError` (writing nothing) on NaN/inf."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    skeleton, tensors = flatten(state)
    bad = non_finite(skeleton, tensors)
    if bad:
        raise NonFiniteStateError(f"non-finite values (NaN or inf) in {', '.join(bad[:5])}"
                                  + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
    clean_stale_tmp(run_dir)
    final = root / f"{PREFIX}{step:012d}"
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=root))
    try:
        # clone(): safetensors refuses tensors that share storage (e.g. views of one buffer).
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, tmp / TENSORS_FILE)
        _write_synced(tmp / TREE_FILE, yaml.safe_dump({"schema_version": SCHEMA_VERSION, "step": step,
                                                       "state": skeleton}))
        with open(tmp / TENSORS_FILE, "rb+") as f:
            os.fsync(f.fileno())
        sums = "".join(f"{sha256_file(tmp / name)}  {name}\n" for name in (TENSORS_FILE, TREE_FILE))
        _write_synced(tmp / SUMS_FILE, sums)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    prune(run_dir, keep, written=final)
    return final


def prune(run_dir: str | Path, keep: int, written: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints, never the newest intact one; returns the deleted.

    ``written``: a checkpoint just written (so intact); when it is the newest, it is not hashed again.
    """
    found = list_checkpoints(run_dir)
    old = found[:-keep] if keep > 0 else found
    if not old:
        return []
    intact = written if found[-1] == written else newest_intact(found)
    doomed = [p for p in old if p != intact]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def newest_intact(checkpoints: list[Path]) -> Path | None:
    """The newest of ``checkpoints`` (oldest first) whose files match their checksums, or None."""
    for path in reversed(checkpoints):
        try:
            verify_checkpoint(path)
        except CheckpointError:
            continue
        return path
    return None


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint directories (``step_*``) of ``run_dir``, oldest first, intact or not (temporary
    directories are ignored; :func:`verify_checkpoint` tells whether one is intact)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)
                  and p.name[len(PREFIX):].isdigit())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint directory of ``run_dir`` (intact or not), or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def _fail(path: Path, problem: str, fix: str | None = None) -> CheckpointError:
    fix = fix or (f"resume=<run> falls back to the newest intact checkpoint by itself; to evaluate or export "
                  f"an older one, move {path.parent.name}/ out of checkpoints/")
    return CheckpointError(problem, file=path, fix=fix)


def verify_checkpoint(path: str | Path) -> None:
    """Check that ``path`` is a checkpoint whose files match ``SHA256SUMS`` (version 1: that it has its
    files); raises :class:`CheckpointError` naming the first bad file."""
    path = Path(path)
    if not (path / TREE_FILE).is_file():
        raise _fail(path / TREE_FILE, f"missing: {path} is not a checkpoint (expected <run>/checkpoints/{PREFIX}*/"
                    f"{TREE_FILE})")
    if not (path / TENSORS_FILE).is_file():
        raise _fail(path / TENSORS_FILE, "missing: the checkpoint has no tensors")
    sums_path = path / SUMS_FILE
    if not sums_path.is_file():
        if _schema_of(path) == 1:
            return
        raise _fail(sums_path, f"missing: without it the checkpoint's files cannot be verified (schema "
                    f"{SCHEMA_VERSION} checkpoints are written with it, last)")
    listed: dict[str, str] = {}
    try:
        for line in sums_path.read_text().splitlines():
            digest, _, name = line.partition("  ")
            if name:
                listed[name.strip()] = digest.strip().lower()
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(sums_path, f"unreadable: {exc}") from None
    for name in (TREE_FILE, TENSORS_FILE):
        if name not in listed:
            raise _fail(sums_path, f"lists no checksum for {name}: the file is truncated or was edited")
        actual = sha256_file(path / name)
        if actual != listed[name]:
            raise _fail(path / name, f"checksum mismatch (sha256 {actual[:16]}..., {SUMS_FILE} says "
                        f"{listed[name][:16]}...): the file is corrupt, truncated or was modified")


def _schema_of(path: Path) -> Any:
    """The ``schema_version`` of ``path/state.yaml`` (None when unreadable)."""
    try:
        doc = yaml.safe_load((path / TREE_FILE).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return doc.get("schema_version") if isinstance(doc, dict) else None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[int, dict[str, Any]]:
    """Verify and read a checkpoint directory; returns ``(step, state)`` with tensors on ``device``.

    Raises :class:`CheckpointError` (naming the file) for anything unusable, NaN/inf values included.
    """
    path = Path(path)
    verify_checkpoint(path)
    tree = path / TREE_FILE
    try:
        doc = yaml.safe_load(tree.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _fail(tree, f"not readable YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not {"schema_version", "step", "state"} <= set(doc) \
            or not isinstance(doc["state"], dict):
        raise _fail(tree, f"expected a mapping with schema_version, step and state (a mapping), got "
                    f"{type(doc).__name__ if not isinstance(doc, dict) else sorted(doc)}")
    if doc["schema_version"] not in (1, SCHEMA_VERSION):
        raise _fail(tree, f"checkpoint schema {doc['schema_version']!r}; this code reads 1 and {SCHEMA_VERSION}",
                    "use the robot_rl version that wrote it")
    if isinstance(doc["step"], bool) or not isinstance(doc["step"], int) or doc["step"] < 0:
        raise _fail(tree, f"step must be an integer >= 0, got {doc['step']!r}")
    try:
        tensors = load_file(path / TENSORS_FILE, device=str(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise _fail(path / TENSORS_FILE, f"not a readable safetensors file: {exc}") from None
    try:
        state = unflatten(doc["state"], tensors)
    except (KeyError, TypeError) as exc:
        raise _fail(tree, f"refers to tensor {exc} that {TENSORS_FILE} does not hold") from None
    bad = non_finite(doc["state"], tensors)
    if bad:
        raise _fail(path, f"holds non-finite values (NaN or inf) in {', '.join(bad[:5])}: it was saved from a "
                    "diverged run or altered")
    return doc["step"], state
