"""The one demo mixer: a batch is ``round(demo_fraction * B)`` rows of the demo partition, then online rows.

Ball et al., "Efficient Online Reinforcement Learning with Offline Data" (RLPD, ICML 2023): every batch is
``demo_fraction`` (0.5: *symmetric sampling*) demo samples and the rest online samples, each drawn uniformly from its
own partition by the same sampler, never spanning the two. Every agent composing ``agent.demos=``
(:class:`robot_rl.data.demo_source.DemoSource`: RLPD's transitions, chunked TD3's chunks) samples through
:func:`sample_mixed`, with the sampler of its batch type (a :class:`~robot_rl.data.replay_buffer.ReplayBuffer`
call).

Shapes: ``B`` batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from robot_rl.data.replay_buffer import ReplayBuffer

Batch = TypeVar("Batch")


def demo_rows(batch_size: int, demo_fraction: float) -> int:
    """How many of ``batch_size`` rows come from the demos: ``round(demo_fraction * batch_size)``."""
    return round(batch_size * demo_fraction)


def cat_batches(first: Batch, second: Batch) -> Batch:
    """The rows of ``first`` followed by those of ``second``: two batches of one dataclass type (tensor fields,
    dicts of tensors, nested batch dataclasses) concatenated field by field along the batch dimension."""
    return _cat(first, second)


def _cat(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return torch.cat([a, b])
    if isinstance(a, dict):
        return {k: _cat(a[k], b[k]) for k in a}
    if dataclasses.is_dataclass(a):
        return type(a)(**{f.name: _cat(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)})
    raise TypeError(f"cat_batches cannot concatenate a {type(a).__name__} field")


def sample_mixed(
    draw: Callable[[ReplayBuffer, int], Batch],
    online: ReplayBuffer,
    demos: ReplayBuffer | None,
    batch_size: int,
    demo_fraction: float,
) -> tuple[Batch, int]:
    """``(batch, n_demo)``: ``draw(demos, n_demo)`` then ``draw(online, B - n_demo)``, concatenated.

    Args:
        draw: ``(buffer, n) -> batch of n rows`` (e.g. ``lambda buf, n: buf.sample_chunks(n, h, gamma)``).
        online: the agent's replay.
        demos: the read-only demo partition (None: every row is online, ``n_demo = 0``); same groups as ``online``.
        batch_size: ``B``.
        demo_fraction: share of demo rows, in ``[0, 1]`` (:func:`demo_rows`).

    Row indices a batch carries (a :class:`~robot_rl.data.replay_buffer.ChunkBatch`'s ``rows`` / ``env``) index
    ``demos`` for the first ``n_demo`` rows and ``online`` for the rest.
    """
    if not 0.0 <= demo_fraction <= 1.0:
        raise ValueError(f"demo_fraction must be in [0, 1], got {demo_fraction}")
    if demos is not None and demos.observation_dims != online.observation_dims:
        raise ValueError(f"demo partition groups {demos.observation_dims} do not match the online "
                         f"{online.observation_dims}")
    n_demo = demo_rows(batch_size, demo_fraction) if demos is not None else 0
    parts = [draw(buf, n) for buf, n in ((demos, n_demo), (online, batch_size - n_demo)) if n > 0]
    return (parts[0] if len(parts) == 1 else cat_batches(*parts)), n_demo
