"""``benchmarks/multi_vs_unified_critic.py``: one tiny real PPO run per arm on g1_reach_walk, evaluated by
``reach_stats`` (reach, time-to-target, closest hand distance, survival)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

_SPEC = importlib.util.spec_from_file_location(
    "multi_vs_unified_critic", Path(__file__).resolve().parents[1] / "benchmarks" / "multi_vs_unified_critic.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@pytest.mark.parametrize("per_group", [True, False])
def test_a_tiny_run_reports_graded_reach_statistics(per_group: bool) -> None:
    out = bench.run(per_group, steps=512, seed=0, num_envs=4, device="cpu", episodes=3)
    assert out["reach"] == 0.0 and math.isnan(out["time_to_target"])  # 512 steps of PPO reach nothing
    assert 0.0 < out["min_distance"] < 1.0  # metres: the target table lies within arm's reach of the pelvis
    assert 0.0 < out["survival"] <= 1.0 and math.isfinite(out["train_return"])
