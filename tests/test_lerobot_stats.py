"""Statistics and window math against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.data.lerobot.stats import ImageStatsAccumulator, aggregate, histogram_quantile, vector_stats
from robot_rl.data.lerobot.windows import delta_indices, window


def test_histogram_quantile_interpolates_inside_the_crossing_bin() -> None:
    hist, edges = np.array([1, 1, 2]), np.array([0.0, 1.0, 2.0, 3.0])  # cumsum 1, 2, 4
    assert histogram_quantile(hist, edges, 0.5) == 0.0  # inside the first bin -> its left edge
    assert histogram_quantile(hist, edges, 2.0) == 2.0  # 1 + (2 - 1) / 1 * 1
    assert histogram_quantile(hist, edges, 3.0) == 2.5  # 2 + (3 - 2) / 2 * 1
    assert histogram_quantile(hist, edges, 9.0) == 3.0  # past the end -> last edge


def test_vector_stats_hand_values() -> None:
    stats = vector_stats(np.array([[0.0, 10.0], [1.0, 10.0], [2.0, 10.0], [3.0, 10.0]]))
    np.testing.assert_allclose(stats["mean"], [1.5, 10.0])
    np.testing.assert_allclose(stats["std"], [np.sqrt(1.25), 0.0], atol=1e-7)
    np.testing.assert_array_equal(stats["min"], [0.0, 10.0])
    np.testing.assert_array_equal(stats["max"], [3.0, 10.0])
    assert stats["count"].tolist() == [4]
    # q50: 2 of 4 values are <= 1, so the estimate is the top of the bin holding 1 (bins 3/5000 wide).
    assert stats["q50"][0] == pytest.approx(1.0, abs=3 / 5000)
    assert stats["q99"][1] == pytest.approx(10.0, abs=1e-9)
    single = vector_stats(np.array([[5.0, 6.0]]))
    np.testing.assert_array_equal(single["q10"], [5.0, 6.0])  # one frame: quantiles are the mean


def test_image_stats_per_channel() -> None:
    frame = np.zeros((2, 2, 3), np.uint8)
    frame[0, :, 0] = 255  # red: half 0, half 255
    frame[..., 1] = 51  # green: constant 0.2
    acc = ImageStatsAccumulator()
    acc.add(frame)
    acc.add(frame)
    stats = acc.stats()
    assert stats["mean"].shape == (3, 1, 1) and stats["count"].tolist() == [2]
    np.testing.assert_allclose(stats["mean"].ravel(), [0.5, 0.2, 0.0])
    np.testing.assert_allclose(stats["std"].ravel(), [0.5, 0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(stats["max"].ravel(), [1.0, 0.2, 0.0])
    np.testing.assert_allclose(stats["q90"].ravel(), [1.0, 0.2, 0.0])


def test_aggregate_pools_variance_exactly() -> None:
    a = {
        "mean": np.array([1.0]),
        "std": np.array([1.0]),
        "min": np.array([0.0]),
        "max": np.array([2.0]),
        "count": np.array([2]),
        "q50": np.array([1.0]),
    }  # data [0, 2]
    b = {
        "mean": np.array([4.0]),
        "std": np.array([0.0]),
        "min": np.array([4.0]),
        "max": np.array([4.0]),
        "count": np.array([1]),
        "q50": np.array([4.0]),
    }  # data [4]
    out = aggregate([a, b])
    np.testing.assert_allclose(out["mean"], [2.0])
    np.testing.assert_allclose(out["std"], [np.sqrt(8 / 3)])  # population std of [0, 2, 4]
    assert out["count"].tolist() == [3] and out["min"].tolist() == [0.0] and out["max"].tolist() == [4.0]
    np.testing.assert_allclose(out["q50"], [2.0])  # count-weighted: (2 * 1 + 1 * 4) / 3


def test_windows_clamp_and_flag_padding() -> None:
    offsets = delta_indices({"action": [-0.1, 0.0, 0.2]}, fps=10, tolerance_s=1e-4)["action"]
    assert offsets.tolist() == [-1, 0, 2]
    rows, pad = window(5, 4, 7, offsets)  # episode rows 4, 5, 6
    assert rows.tolist() == [4, 5, 6] and pad.tolist() == [False, False, True]
    rows, pad = window(4, 4, 7, offsets)
    assert rows.tolist() == [4, 4, 6] and pad.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="not multiples of 1/10s"):
        delta_indices({"action": [0.05]}, fps=10, tolerance_s=1e-4)
