"""Raw rows of a benchmark run, written as JSON beside the figure they back (under ``docs/results/``).

Every benchmark calls :func:`write_rows` once its rows are known: the file holds the rows and, beside
them, what a reader needs to judge them: the command line, the git commit (and whether the work tree
had uncommitted changes; the start's too where a commit was made while it ran), the load average before and
after, the UTC start and end and the machine (cores, CPU model and instruction sets, torch, Python,
platform). Benchmarks import it as ``from _results import write_rows`` (a script's own folder is first on
``sys.path``); tests load the scripts with ``tests/bench_scripts.py``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
"""Default home of every benchmark's rows: ``docs/results/<topic>/<benchmark>.json``."""

_LOAD_AT_IMPORT = os.getloadavg()[0]
_STARTED = datetime.datetime.now(datetime.UTC)


def git_commit(repo: Path = REPO) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of ``repo`` (None where git or the checkout is absent)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True,
                             timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha, "dirty": bool(status.strip())}


_COMMIT_AT_IMPORT = git_commit()
"""The checkout when the benchmark started (this module is imported at its start)."""


SPEED_FEATURES = ("avx2", "avx512_f", "avx512_bf16", "amx_bf16", "neon", "bf16", "sve")
"""CPU instruction sets a row records (those present): whether float32 runs AVX2 or AVX-512 and bfloat16 in
hardware decides most of a CPU timing (bf16 SAC updates measured 1.4x faster than float32 with AVX512-BF16, 8.4x slower
without any bf16 instructions)."""


def machine() -> dict[str, Any]:
    """Cores, CPU model and its speed-relevant instruction sets, torch / Python versions and platform."""
    import torch

    capabilities = torch.cpu.get_capabilities()
    return {"cpu_count": os.cpu_count(), "cpu": capabilities.get("cpu_name") or platform.processor(),
            "cpu_features": [name for name in SPEED_FEATURES if capabilities.get(name)],
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(), "python": platform.python_version(), "platform": platform.platform()}


def run_facts(argv: list[str]) -> dict[str, Any]:
    """The ``meta`` block of a results file: command, commit, load averages, date (the end; ``started``: the
    start), machine. ``commit`` / ``dirty`` are the checkout's at the end; where it changed while the benchmark
    ran (a commit made meanwhile; the modules it loaded at its start are the start's), ``commit_at_start`` /
    ``dirty_at_start`` say what it was when the benchmark started."""
    now = git_commit()
    moved = {f"{k}_at_start": v for k, v in _COMMIT_AT_IMPORT.items()} if _COMMIT_AT_IMPORT != now else {}
    return {"command": shlex.join(["python", *argv]), **now, **moved,
            "load_average": {"start": round(_LOAD_AT_IMPORT, 2), "end": round(os.getloadavg()[0], 2)},
            "started": _STARTED.isoformat(timespec="seconds"),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "machine": machine()}


def commit_label(meta: dict[str, Any]) -> str:
    """How a results file's ``meta`` names its code: ``"abc1234"`` (``" dirty"`` after it where the checkout had
    changes), and where a commit was made while it ran, ``"abc1234 at the start, def5678 dirty at the end"`` (the
    modules it ran are the start's)."""
    def one(commit: Any, dirty: Any) -> str:
        return f"{str(commit)[:7]}{' dirty' if dirty else ''}"

    end = one(meta.get("commit"), meta.get("dirty"))
    if "commit_at_start" not in meta:
        return end
    return f"{one(meta['commit_at_start'], meta.get('dirty_at_start'))} at the start, {end} at the end"


def write_rows(path: Path | str, rows: list[dict[str, Any]] | dict[str, Any], argv: list[str] | None = None,
               **extra: Any) -> Path:
    """Write ``{"meta": run_facts(argv), "rows": rows, **extra}`` to ``path`` atomically; returns the path.

    ``rows`` are the benchmark's measurements as plain data (a list of row dicts, or rows keyed by arm where the
    benchmark's ``--merge`` reads them so); ``argv`` defaults to ``sys.argv``; ``extra`` holds whatever else the
    benchmark keeps (settings, summaries). Paths are written as strings and NaN as ``NaN`` (Python's json reads
    it back). Parent folders are created; a printed line says where the file went.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": run_facts(sys.argv if argv is None else argv), "rows": rows, **extra}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)
    print(f"rows written to {path}", flush=True)
    return path
