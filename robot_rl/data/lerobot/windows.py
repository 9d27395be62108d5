"""``delta_timestamps`` windows: several frames around each sampled frame (action chunks, history).

A window for feature ``key`` is a list of offsets in seconds, e.g. ``[0, 1/fps, ..., (H-1)/fps]``
for an action chunk of H steps. Offsets must be multiples of ``1/fps`` (within ``tolerance_s``).
Offsets that fall outside the sampled frame's episode are clamped to its first or last frame and
flagged in ``<key>_is_pad``, exactly as LeRobot does.
"""

from __future__ import annotations

import numpy as np


def delta_indices(delta_timestamps: dict[str, list[float]], fps: int, tolerance_s: float) -> dict[str, np.ndarray]:
    """Offsets in frames ``{key: int64 [W]}``; raises naming any offset that is not a multiple of 1/fps."""
    out = {}
    for key, deltas in delta_timestamps.items():
        d = np.asarray(deltas, dtype=np.float64).reshape(-1)
        if d.size == 0:
            raise ValueError(f"delta_timestamps[{key!r}] is empty; give at least one offset (e.g. [0.0])")
        frames = np.round(d * fps)
        off = np.abs(d * fps - frames) / fps
        if (off > tolerance_s).any():
            bad = d[off > tolerance_s].tolist()
            raise ValueError(
                f"delta_timestamps[{key!r}] = {bad} are not multiples of 1/{fps}s; use e.g. "
                f"[i / {fps} for i in range(H)]"
            )
        out[key] = frames.astype(np.int64)
    return out


def window(index: int, ep_from: int, ep_to: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``[W]`` of ``index + offsets`` clamped to ``[ep_from, ep_to)``, and is_pad ``[W]``."""
    wanted = index + offsets
    is_pad = (wanted < ep_from) | (wanted >= ep_to)
    return np.clip(wanted, ep_from, ep_to - 1), is_pad
