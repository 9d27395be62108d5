"""Loop statistics of a node: per-tick timings in a fixed ring buffer, event counts (numpy only).

Nothing is allocated per tick: each published command writes one row of a preallocated
``[capacity, F]`` float64 array (the last ``capacity`` ticks are kept, so a node running for hours
keeps constant memory and a constant cost per summary).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

TICK_FIELDS = ("tick_time", "period_ms", "latency_ms", "receive_ms", "compute_ms", "inference_ms", "image_age_ms")
"""One row per published command: monotonic time (s), period since the previous command, observation
(JointState stamp) to command latency, its receive (stamp -> callback) and compute (callback ->
publish) parts, the policy inference time (NaN when the tick reused a chunk) and, for a VLA query, how much older
than the joint state its camera frames were (stamp difference; NaN otherwise)."""


class LoopStats:
    """Per-tick samples and event counts; :meth:`summary` gives percentiles in ms and counts.

    Args:
        capacity: ticks kept (default 4096: 82 s at 50 Hz).
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.ticks = np.full((capacity, len(TICK_FIELDS)), np.nan)
        self.count_ticks = 0
        self.samples: dict[str, list[float]] = {}
        self.events: Counter[str] = Counter()
        self._last_tick: float | None = None
        self._col = {name: i for i, name in enumerate(TICK_FIELDS)}

    def tick(self, now: float, latency_ms: float, receive_ms: float, compute_ms: float,
             inference_ms: float, image_age_ms: float = float("nan")) -> None:
        """Record a command published at monotonic ``now`` (NaN for a part that does not apply)."""
        row = self.ticks[self.count_ticks % len(self.ticks)]
        row[0] = now
        row[1] = 1e3 * (now - self._last_tick) if self._last_tick is not None else np.nan
        row[2:] = latency_ms, receive_ms, compute_ms, inference_ms, image_age_ms
        self._last_tick = now
        self.count_ticks += 1
        self.events["commands"] += 1

    def sample(self, name: str, value: float) -> None:
        """Record one sample of a rare quantity ``name`` (e.g. the watchdog's delay)."""
        self.samples.setdefault(name, []).append(value)

    def count(self, event: str) -> None:
        """Count one safety event / intervention."""
        self.events[event] += 1

    def recent(self) -> np.ndarray:
        """``[n, F]`` the kept ticks, oldest first (columns :data:`TICK_FIELDS`)."""
        n, cap = self.count_ticks, len(self.ticks)
        if n <= cap:
            return self.ticks[:n]
        return np.roll(self.ticks, -(n % cap), axis=0)

    def summary(self) -> dict[str, float | int]:
        """``{name_p50_ms, name_p99_ms, name_mean_ms, name_std_ms, name_min_ms, name_max_ms, <event>: count}``
        over the kept ticks and the rare samples."""
        out: dict[str, float | int] = {}
        ticks = self.recent()
        columns = {name: ticks[:, self._col[name]] for name in TICK_FIELDS[1:]}
        for name, values in (columns | {k: np.asarray(v) for k, v in self.samples.items()}).items():
            x = values[np.isfinite(values)]
            if len(x):
                p50, p99 = np.percentile(x, [50, 99])
                base = name.removesuffix("_ms")
                out |= {
                    f"{base}_p50_ms": float(p50),
                    f"{base}_p99_ms": float(p99),
                    f"{base}_mean_ms": float(x.mean()),
                    f"{base}_std_ms": float(x.std()),
                    f"{base}_min_ms": float(x.min()),
                    f"{base}_max_ms": float(x.max()),
                }
        return out | dict(self.events)

    def raw(self) -> dict[str, list[float]]:
        """The kept ticks as ``{field: [values]}`` (NaN where a part does not apply), for benchmark files."""
        ticks = self.recent()
        return {name: ticks[:, i].tolist() for i, name in enumerate(TICK_FIELDS)}
