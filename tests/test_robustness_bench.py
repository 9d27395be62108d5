"""``benchmarks/robustness.py``: its summary table on hand-made rows (every count comes from the rows)."""

from __future__ import annotations

from bench_scripts import load

bench = load("robustness")


def _fuzz(kind: str, verdict: str, lost: list[str] | None = None) -> dict:
    return {"layer": "fuzz", "name": f"{kind}/x", "kind": kind, "verdict": verdict, "rc": 2, "lost": lost or []}


def _kill_train(resumed: bool, during: bool, lost_good: bool = False, corrupt: int = 0, early: bool = False) -> dict:
    return {"layer": "kill_train", "resumed": resumed, "during_checkpoint_write": during, "lost_good": lost_good,
            "corrupt_before": ["c"] * corrupt, "corrupt_after": [], "finished_before_kill": early}


def _kill_record(readable: bool, resumed: bool, lost: int) -> dict:
    return {"layer": "kill_record", "readable": readable, "final_readable": resumed, "resume_rc": 0 if resumed else 2,
            "lost": lost, "finished_before_kill": False}


def test_table_counts_verdicts_per_kind_and_kill_outcomes():
    rows = [_fuzz("artifact", "clear"), _fuzz("artifact", "traceback"), _fuzz("config", "silent"),
            _fuzz("config", "clear", lost=["run/checkpoints"]), _fuzz("cli", "vague"), _fuzz("cli", "other"),
            _kill_train(True, True), _kill_train(False, False, lost_good=True, corrupt=2, early=True),
            _kill_record(True, True, 0), _kill_record(False, False, 3)]
    lines = bench.table(rows).splitlines()
    assert lines[2] == "| fuzz corpus | 6 | 2 | 1 | 1 | 1 | 1 | - | 1 cases |"
    assert lines[3] == "| &nbsp; artifact | 2 | 1 | 0 | 0 | 1 | 0 | - | 0 |"
    assert lines[5] == "| &nbsp; config | 2 | 1 | 0 | 1 | 0 | 0 | - | 1 |"
    assert lines[6] == ("| kill -9 train (1 during a checkpoint write, 1 finished before) | 2 | - | - | - | - | - "
                        "| 1/2 resumed | 1 lost good, 2 corrupt |")
    assert lines[7] == ("| kill -9 record (0 finished before the kill) | 2 | - | - | - | - | - | 1/2 readable, "
                        "1/2 resumed | 3 complete episodes |")
