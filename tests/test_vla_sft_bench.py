"""benchmarks/vla_sft.py: the results table from hand-made rows (success, interval, target, per colour, control)."""

from __future__ import annotations

from bench_scripts import load

bench = load("vla_sft")


def summary(rate: float, ci: list[float], per: dict[str, float]) -> dict:
    by_target = {k: {"episodes": 25, "success_rate": v, "success_ci95": [0, 1]} for k, v in per.items()}
    return {"episodes": 100, "success_rate": rate, "success_ci95": ci, "success_by_target": by_target}


def test_the_table_puts_success_beside_its_target_and_the_wrong_instruction_beside_chance() -> None:
    row = {"task": "so101_reach_lang", "cameras": ["front", "top"], "agent": ["lr=1e-3"], "demos": 100,
           "train_wall_s": 1500.0,
           "gradient_steps": 7000, "target": 0.7, "chance": 0.25,
           "named": summary(0.74, [0.647, 0.815], {"red": 0.8, "blue": 0.68}),
           "wrong_instruction": summary(0.12, [0.07, 0.2], {"red": 0.1, "blue": 0.14})}
    meta = {"command": "python benchmarks/vla_sft.py", "commit": "abc", "load_average": {"start": 1.0, "end": 2.0},
            "date": "2026-12-01T21:00:00+00:00"}
    text = bench.table([row], [meta])
    line = next(x for x in text.splitlines() if x.startswith("| so101_reach_lang"))
    assert ("| front + top | lr=1e-3 | 100 | 25.0 min | 7000 | 74% [65-82] (>= 70%) over 100 | red 80%, blue 68% "
            "| 12% [7-20] (25%) |" in line)
    assert "- Command: `python benchmarks/vla_sft.py`; commit abc" in text
