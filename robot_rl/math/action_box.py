"""The one owner of the ``[-1, 1]`` <-> action-box ``[low, high]`` affine map (agents, BC, exported actors).

Plain arithmetic, so it takes torch tensors or numpy arrays alike; ``low``/``high`` ``[A]`` broadcast
over leading batch dimensions. ``sim`` keeps its own copy for ``joint_position`` control
(``sim.env.TaskEnv._action_map``: offset = mid-range, scale = half-range), pinned equal by
``tests/test_action_maps.py``.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def from_unit(y: T, low: T, high: T) -> T:
    """``[..., A]`` in ``[low, high]`` from ``y`` ``[..., A]`` in ``[-1, 1]``: ``low + (y + 1) / 2 * (high - low)``."""
    return low + (y + 1.0) * 0.5 * (high - low)


def to_unit(action: T, low: T, high: T) -> T:
    """Inverse of :func:`from_unit`: ``[..., A]`` in ``[-1, 1]`` from ``action`` ``[..., A]`` in ``[low, high]``."""
    return (action - low) / (high - low) * 2.0 - 1.0
