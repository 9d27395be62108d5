"""Loop statistics of a node: period, latency and inference samples, event counts (numpy only)."""

from __future__ import annotations

from collections import Counter

import numpy as np


class LoopStats:
    """Collects per-tick samples; :meth:`summary` gives percentiles in milliseconds and counts."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {"period_ms": [], "latency_ms": [], "inference_ms": []}
        self.events: Counter[str] = Counter()
        self._last_tick: float | None = None

    def tick(self, now: float, latency_ms: float | None) -> None:
        """Record a published command at monotonic time ``now`` and its observation-to-command latency."""
        if self._last_tick is not None:
            self.samples["period_ms"].append(1e3 * (now - self._last_tick))
        self._last_tick = now
        if latency_ms is not None:
            self.samples["latency_ms"].append(latency_ms)
        self.events["commands"] += 1

    def sample(self, name: str, value: float) -> None:
        """Record one sample of ``name``."""
        self.samples.setdefault(name, []).append(value)

    def count(self, event: str) -> None:
        """Count one safety event / intervention."""
        self.events[event] += 1

    def summary(self) -> dict[str, float | int]:
        """``{name_p50, name_p99, name_mean, name_std, name_min, name_max, <event>: count}``."""
        out: dict[str, float | int] = {}
        for name, values in self.samples.items():
            if values:
                x = np.asarray(values)
                base = name.removesuffix("_ms")
                out |= {
                    f"{base}_p50_ms": float(np.percentile(x, 50)),
                    f"{base}_p99_ms": float(np.percentile(x, 99)),
                    f"{base}_mean_ms": float(x.mean()),
                    f"{base}_std_ms": float(x.std()),
                    f"{base}_min_ms": float(x.min()),
                    f"{base}_max_ms": float(x.max()),
                }
        return out | dict(self.events)
