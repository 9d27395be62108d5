"""``benchmarks/_results.py``: every benchmark's results file carries its rows and the facts to judge them."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from pathlib import Path

import torch
from bench_scripts import load

results = load("_results")


def test_write_rows_keeps_rows_and_extras_beside_the_run_facts(tmp_path: Path) -> None:
    rows = [{"seed": 0, "wall_s": 1.5, "hit": (1.0, 2.0, 3), "never": float("nan")}]
    path = results.write_rows(tmp_path / "deep" / "bench.json", rows, ["benchmarks/x.py", "--agents", "sac (amp=bf16)"],
                              settings={"out": tmp_path / "a"})
    data = json.loads(path.read_text())
    assert data["rows"][0]["hit"] == [1.0, 2.0, 3] and math.isnan(data["rows"][0]["never"])  # NaN reads back
    assert data["settings"] == {"out": str(tmp_path / "a")}  # paths as strings
    meta = data["meta"]
    assert meta["command"] == "python benchmarks/x.py --agents 'sac (amp=bf16)'"  # quoted: it can be rerun
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=results.REPO, capture_output=True, text=True).stdout
    assert meta["commit"] == head.strip() and isinstance(meta["dirty"], bool)
    assert meta["machine"]["cpu_count"] == os.cpu_count() and meta["machine"]["torch"] == torch.__version__
    # the CPU decides a timing: its model and the instruction sets float32 / bfloat16 run on
    capabilities = torch.cpu.get_capabilities()
    assert meta["machine"]["cpu"] == (capabilities.get("cpu_name") or platform.processor())
    assert set(meta["machine"]["cpu_features"]) == {k for k in ("avx2", "avx512_f", "avx512_bf16", "amx_bf16", "neon",
                                                                "bf16", "sve") if capabilities.get(k)}
    assert set(meta["load_average"]) == {"start", "end"} and meta["date"].endswith("+00:00")
    assert meta["started"] <= meta["date"] and "commit_at_start" not in meta  # the checkout did not move
    assert not list(tmp_path.glob("deep/*.tmp"))  # written atomically: no temporary file left


def test_a_commit_made_while_a_benchmark_ran_is_named_beside_the_one_it_started_from(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(results, "_COMMIT_AT_IMPORT", {"commit": "0" * 40, "dirty": True})
    meta = json.loads(results.write_rows(tmp_path / "b.json", [], ["x.py"]).read_text())["meta"]
    assert meta["commit_at_start"] == "0" * 40 and meta["dirty_at_start"] is True
    assert meta["commit"] == results.git_commit()["commit"]


def test_the_commit_label_names_both_commits_when_the_checkout_moved() -> None:
    assert results.commit_label({"commit": "a" * 40, "dirty": False}) == "aaaaaaa"
    assert results.commit_label({"commit": "a" * 40, "dirty": True}) == "aaaaaaa dirty"
    moved = {"commit": "b" * 40, "dirty": True, "commit_at_start": "a" * 40, "dirty_at_start": False}
    assert results.commit_label(moved) == "aaaaaaa at the start, bbbbbbb dirty at the end"


def test_git_commit_outside_a_checkout_is_none(tmp_path: Path) -> None:
    assert results.git_commit(tmp_path) == {"commit": None, "dirty": None}


def test_every_benchmark_writes_its_rows_through_the_helper() -> None:
    scripts = sorted(p for p in results.REPO.joinpath("benchmarks").glob("*.py") if not p.name.startswith("_"))
    assert [p.name for p in scripts if "write_rows(" not in p.read_text()] == []
    assert [p.name for p in scripts if "RESULTS" not in p.read_text()] == []  # defaults under docs/results/
