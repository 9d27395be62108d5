"""Per-episode and whole-dataset feature statistics, as LeRobot stores them.

Each numeric feature gets ``min, max, mean, std, count, q01, q10, q50, q90, q99``, computed per
dimension over the frames of an episode. Quantiles follow LeRobot's histogram estimate
(5000 equal bins between ``min - 1e-10`` and ``max + 1e-10``, linear interpolation inside the
bin that crosses ``q * count``) so that our numbers agree with datasets LeRobot wrote. Features of
2-5 dims ``[..., N]`` are reduced over all but their last axis (statistics ``[N]``), as LeRobot does. Images and
videos get per-channel statistics of pixel values scaled to [0, 1], stored with shape ``[3, 1, 1]``;
their histograms have one bin per uint8 value, so their quantiles are exact.

Dataset statistics (``meta/stats.json``) aggregate episodes: min of mins, max of maxes,
count-weighted mean, pooled variance, count-weighted mean of each quantile (LeRobot's rule).
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)
NUM_BINS = 5000

Stats = dict[str, np.ndarray]


def histogram_quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    """Value below which ``target`` counts of the histogram lie, interpolated inside its bin.

    ``hist`` [B] counts, ``edges`` [B + 1] increasing bin edges.
    """
    cumsum = np.cumsum(hist)
    idx = int(np.searchsorted(cumsum, target))
    if idx == 0:
        return float(edges[0])
    if idx >= len(cumsum):
        return float(edges[-1])
    before = cumsum[idx - 1]
    in_bin = cumsum[idx] - before
    if in_bin == 0:
        return float(edges[idx])
    return float(edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx]))


def vector_stats(values: np.ndarray) -> Stats:
    """Statistics of ``values`` ``[num_frames, dim]`` per dimension (all outputs ``[dim]``, count ``[1]``).

    With fewer than two frames the quantiles are the mean, as in LeRobot.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"vector_stats needs a non-empty [num_frames, dim] array, got shape {x.shape}")
    n, dim = x.shape
    mean = x.mean(axis=0)
    out: Stats = {
        "min": x.min(axis=0),
        "max": x.max(axis=0),
        "mean": mean,
        "std": np.sqrt(np.maximum(0.0, (x**2).mean(axis=0) - mean**2)) if n >= 2 else x.std(axis=0),
        "count": np.array([n], dtype=np.int64),
    }
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        if n < 2:
            out[key] = mean.copy()
            continue
        values_q = np.empty(dim)
        for d in range(dim):
            edges = np.linspace(out["min"][d] - 1e-10, out["max"][d] + 1e-10, NUM_BINS + 1)
            hist, _ = np.histogram(x[:, d], bins=edges)
            values_q[d] = histogram_quantile(hist, edges, q * n)
        out[key] = values_q
    return out


def feature_stats(values: np.ndarray) -> Stats:
    """Statistics of a numeric feature ``[num_frames, *shape]``, shaped as LeRobot 0.6.1 stores them.

    Scalars (shape ``[1]``) and vectors ``[N]`` get per-dimension statistics (``[1]``, ``[N]``). A feature
    of 2-5 dims ``[..., N]`` is reduced over every axis but the last (LeRobot's ``RunningQuantileStats``
    flattens all but the last axis), so its statistics are ``[N]``; ``count`` stays the number of frames.
    With a single frame the quantiles are the mean (LeRobot keeps the per-element shape there, which its
    own aggregation cannot combine with other episodes; we keep ``[N]``).
    """
    x = np.asarray(values)
    if x.ndim <= 2:
        return vector_stats(x.reshape(x.shape[0], -1).astype(np.float64))
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    out = vector_stats(rows)
    if x.shape[0] < 2:
        out.update({key: out["mean"].copy() for key in QUANTILE_KEYS})
    out["count"] = np.array([x.shape[0]], dtype=np.int64)
    return out


def stats_shapes(shape: tuple[int, ...], visual: bool) -> tuple[tuple[int, ...], ...]:
    """Shapes a feature's stored statistics may have: LeRobot's first, then the per-element one.

    Cameras ``(3, 1, 1)``; scalars and vectors their own shape; 2-5 dim features ``(shape[-1],)`` (LeRobot
    0.6.1), or ``shape`` itself (written by robot_rl before it followed LeRobot, read and converted).
    """
    if visual:
        return ((3, 1, 1),)
    if len(shape) <= 1:
        return (tuple(shape),)
    return ((shape[-1],), tuple(shape))


def conform(stats: Stats, shape: tuple[int, ...]) -> Stats:
    """Per-element statistics of a 2-5 dim feature ``shape`` reduced to LeRobot's ``[shape[-1]]`` layout.

    min/max/mean/std are exact (every element saw the same frames); quantiles are the mean over the
    leading axes, an approximation (the histograms are gone). Statistics already ``[shape[-1]]`` pass.
    """
    if len(shape) <= 1 or np.asarray(stats["mean"]).shape != tuple(shape):
        return stats
    axes = tuple(range(len(shape) - 1))
    mean = stats["mean"].mean(axis=axes)
    var = (stats["std"] ** 2 + (stats["mean"] - mean) ** 2).mean(axis=axes)
    out: Stats = {"min": stats["min"].min(axis=axes), "max": stats["max"].max(axis=axes), "mean": mean,
                  "std": np.sqrt(var), "count": stats["count"]}
    out.update({k: stats[k].mean(axis=axes) for k in QUANTILE_KEYS if k in stats})
    return out


class ImageStatsAccumulator:
    """Per-channel pixel statistics of a stream of uint8 ``[H, W, 3]`` frames, in [0, 1] units."""

    def __init__(self) -> None:
        """Start with no frames."""
        self.hist = np.zeros((3, 256), dtype=np.int64)
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        """Count the pixels of one uint8 frame ``[H, W, 3]``."""
        pixels = frame.reshape(-1, 3)
        for c in range(3):
            self.hist[c] += np.bincount(pixels[:, c], minlength=256)
        self.frames += 1

    def stats(self) -> Stats:
        """Per-channel statistics of every pixel seen: ``[3, 1, 1]`` in [0, 1]; count ``[1]`` frames."""
        if self.frames == 0:
            raise ValueError("no frames were added; an episode needs at least one frame")
        levels = np.arange(256, dtype=np.float64) / 255.0
        total = self.hist.sum(axis=1)
        mean = (self.hist * levels).sum(axis=1) / total
        var = (self.hist * levels**2).sum(axis=1) / total - mean**2
        present = self.hist > 0
        out: Stats = {
            "min": np.array([levels[p][0] for p in present]),
            "max": np.array([levels[p][-1] for p in present]),
            "mean": mean,
            "std": np.sqrt(np.maximum(var, 0.0)),
            "count": np.array([self.frames], dtype=np.int64),
        }
        for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
            cdf = np.cumsum(self.hist, axis=1) / total[:, None]
            out[key] = np.array([levels[int(np.searchsorted(cdf[c], q))] for c in range(3)])
        return {k: v if k == "count" else v.reshape(3, 1, 1) for k, v in out.items()}


def aggregate(stats_list: list[Stats]) -> Stats:
    """Combine one feature's statistics over episodes (LeRobot's rule; see the module docstring)."""
    if not stats_list:
        raise ValueError("aggregate needs at least one episode's statistics")
    counts = np.stack([s["count"] for s in stats_list]).astype(np.float64)
    total = counts.sum(axis=0)
    means = np.stack([s["mean"] for s in stats_list])
    weights = counts.reshape(counts.shape[0], *([1] * (means.ndim - 1)))
    mean = (means * weights).sum(axis=0) / total.reshape(*([1] * (means.ndim - 1)))
    variances = np.stack([s["std"] ** 2 for s in stats_list])
    var = ((variances + (means - mean) ** 2) * weights).sum(axis=0) / total.reshape(*([1] * (means.ndim - 1)))
    out: Stats = {
        "min": np.min(np.stack([s["min"] for s in stats_list]), axis=0),
        "max": np.max(np.stack([s["max"] for s in stats_list]), axis=0),
        "mean": mean,
        "std": np.sqrt(var),
        "count": total.astype(np.int64),
    }
    for key in QUANTILE_KEYS:
        if all(key in s for s in stats_list):
            q = np.stack([s[key] for s in stats_list])
            out[key] = (q * weights).sum(axis=0) / total.reshape(*([1] * (means.ndim - 1)))
    return out


def aggregate_dataset(episode_stats: list[dict[str, Stats]]) -> dict[str, Stats]:
    """Aggregate every feature present in any episode's statistics."""
    keys = sorted({k for ep in episode_stats for k in ep})
    return {k: aggregate([ep[k] for ep in episode_stats if k in ep]) for k in keys}


def stats_to_json(stats: dict[str, Stats]) -> dict[str, dict[str, list]]:
    """Nested lists for ``meta/stats.json``."""
    return {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in stats.items()}


def stats_from_json(raw: dict[str, dict[str, list]]) -> dict[str, Stats]:
    """Arrays back from ``meta/stats.json`` (count as int64, the rest float64)."""
    return {
        k: {s: np.asarray(v, dtype=np.int64 if s == "count" else np.float64) for s, v in st.items()}
        for k, st in raw.items()
    }
