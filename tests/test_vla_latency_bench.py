"""``benchmarks/vla_latency.py``: its percentiles on hand-made tick times (all ticks vs the inference ticks)."""

from __future__ import annotations

import numpy as np
import pytest
from bench_scripts import load

bench = load("vla_latency")


def test_summarize_splits_the_inference_ticks():
    ticks = np.array([1.0] * 15 + [10.0] + [1.0] * 15 + [30.0])  # an inference every 16th tick
    inferred = np.zeros(32, dtype=bool)
    inferred[[15, 31]] = True
    out = bench.summarize(ticks, inferred)
    assert out["ticks"] == 32 and out["inference_share"] == pytest.approx(2 / 32)
    assert out["all_p50_ms"] == 1.0 and out["all_max_ms"] == 30.0
    assert out["inference_p50_ms"] == pytest.approx(20.0) and out["inference_p99_ms"] == pytest.approx(29.8)
    assert out["all_p99_ms"] == pytest.approx(np.percentile(ticks, 99))


def test_summarize_without_inference_ticks_has_no_inference_figures():
    out = bench.summarize(np.array([1.0, 2.0]), np.zeros(2, dtype=bool))
    assert "inference_p99_ms" not in out and out["all_p99_ms"] == pytest.approx(1.99)
