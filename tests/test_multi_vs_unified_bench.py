"""``benchmarks/multi_vs_unified_critic.py``: one tiny real PPO run per arm on g1_reach_walk, evaluated by
``reach_stats`` (reach, time-to-target, closest hand distance, survival)."""

from __future__ import annotations

import math

import pytest
from bench_scripts import load

pytestmark = pytest.mark.usefixtures("one_thread")

bench = load("multi_vs_unified_critic")


@pytest.mark.robot_assets("unitree_g1")
@pytest.mark.parametrize("per_group", [True, False])
def test_a_tiny_run_reports_graded_reach_statistics(per_group: bool) -> None:
    out = bench.run(per_group, steps=512, seed=0, num_envs=4, device="cpu", episodes=3)
    assert out["reach"] == 0.0 and math.isnan(out["time_to_target"])  # 512 steps of PPO reach nothing
    assert 0.0 < out["min_distance"] < 1.0  # metres: the target table lies within arm's reach of the pelvis
    assert 0.0 < out["survival"] <= 1.0 and math.isfinite(out["train_return"])


def test_merge_reports_seed_means_and_reach_wins(tmp_path, monkeypatch, capsys) -> None:
    import json
    import sys

    def row(seed: int, reach: float, ttt: float) -> dict:
        return {"seed": seed, "reach": reach, "time_to_target": ttt, "min_distance": 0.1, "survival": 1.0,
                "train_return": 1.0, "wall_s": 1.0}

    saved = {"settings": {"steps": "100", "num_envs": "4", "episodes": "8"},
             "rows": {"per_group": [row(0, 0.5, 300.0), row(1, 0.25, 500.0)],
                      "unified": [row(0, 0.25, 200.0), row(1, 0.0, float("nan"))]}}
    (tmp_path / "a.json").write_text(json.dumps(saved))
    monkeypatch.setattr(sys, "argv", ["bench", "--merge", str(tmp_path / "a.json")])
    bench.main()
    out = capsys.readouterr().out
    assert "per run: 100 env steps, 4 envs, 8 evaluation episodes" in out
    assert "per-group higher in 2, equal in 0, of 2 seeds" in out
    reach = next(line for line in out.splitlines() if line.startswith("reach "))
    ttt = next(line for line in out.splitlines() if line.startswith("time_to_target"))
    assert reach.split()[1:] == ["0.375", "0.125", "3.000"]
    assert ttt.split()[1:] == ["400.000", "200.000", "2.000"]  # the unified seed that never reached is left out
