"""Targets for critics of action chunks: chunked n-step returns, boundary masks, intra-chunk returns.

A chunked critic scores ``Q(s_t, a_{t:t+h})``, the value of executing ``h`` actions open loop
(Q-chunking, Li, Zhou & Levine 2025; CQN-AS, Seo et al. 2024). Its TD target is

    ``y = sum_{k<h} gamma^k r_{t+k} + gamma^h * (1 - terminated) * Q_target(s_{t+h}, pi(s_{t+h}))``.

Episode ends inside a chunk (VecEnv contract, DESIGN.md contract 1):

- *termination* at step ``k``: the sum stops at ``k`` and there is no bootstrap; the chunk is valid
  (the later actions were never needed).
- *truncation* (time limit) at step ``k``: the chunk was cut by the clock, not by the task. With
  ``on_truncation="bootstrap"`` the target bootstraps ``gamma^(k+1) V(s'_k)`` from that step's true
  final observation (the rest of the chunk is replaced by the policy's value); with ``"mask"`` the
  chunk is dropped from the loss (``valid = False``), the strict Q-chunking choice.
- the newest stored step of a replay window counts as a truncation (the future is not stored).

Intra-chunk n-step returns (AC3, 2025) give one target per prefix length ``k = 1..h`` so every
step of the chunk gets a bootstrapped signal.

Pure math on already-gathered tensors; the replay buffer gathers them
(:meth:`robot_rl.data.replay_buffer.ReplayBuffer.sample_chunks`).

Shapes: ``B`` batch, ``h`` chunk length, ``A`` action size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from robot_rl.math.td_targets import check_window

OnTruncation = Literal["bootstrap", "mask"]
ON_TRUNCATION = ("bootstrap", "mask")


@dataclass
class ChunkReturn:
    """A chunk's discounted reward sum, ready for ``returns + discount * V(next_obs[last])``.

    Attributes:
        returns: ``[B]`` ``sum_{k <= last} gamma^k r_{t+k}``.
        discount: ``[B]`` ``gamma^(last + 1)``, 0 where the chunk ended by termination.
        last: ``[B]`` long, the step whose true next observation is the bootstrap state.
        length: ``[B]`` long, executed steps ``last + 1``.
        valid: ``[B]`` bool, False for chunks that must not enter the loss (truncated with ``mask``).
    """

    returns: torch.Tensor
    discount: torch.Tensor
    last: torch.Tensor
    length: torch.Tensor
    valid: torch.Tensor


def alive_mask(terminated: torch.Tensor, truncated: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Float mask of the flags' shape (``[B, h]``, or time-major ``[T, B]`` with ``dim=0``): 1 for the steps of the
    first step's episode along ``dim`` (up to and including its first termination or truncation), 0 after."""
    ended = (terminated | truncated).float()
    return ((torch.cumsum(ended, dim=dim) - ended) == 0).float()


def chunk_return(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    on_truncation: OnTruncation = "bootstrap",
) -> ChunkReturn:
    """Discounted sum over a chunk of ``h`` steps that stops at its first episode end.

    Args:
        rewards: ``[B, h]`` rewards of the chunk's steps, oldest first.
        terminated: ``[B, h]`` bool, the step ended in a terminal state.
        truncated: ``[B, h]`` bool, the step hit the time limit (or is the newest stored step).
        gamma: discount in ``[0, 1]``.
        on_truncation: ``bootstrap`` (short bootstrap from the final observation) or ``mask``.

    Returns:
        :class:`ChunkReturn`; rewards after the first end belong to another episode and are ignored.
    """
    check_window(rewards, terminated, truncated, gamma, "[B, h]")
    if on_truncation not in ON_TRUNCATION:
        raise ValueError(f"on_truncation must be one of {ON_TRUNCATION}, got {on_truncation!r}")
    h = rewards.shape[1]
    alive = alive_mask(terminated, truncated).to(rewards.dtype)
    powers = gamma ** torch.arange(h, device=rewards.device, dtype=rewards.dtype)
    returns = (rewards * alive * powers).sum(1)
    last = (alive.sum(1) - 1).long()
    ended_by_term = terminated.gather(1, last[:, None]).squeeze(1)
    ended_by_trunc = truncated.gather(1, last[:, None]).squeeze(1) & ~ended_by_term
    discount = gamma ** (last + 1).to(rewards.dtype) * (~ended_by_term).to(rewards.dtype)
    # A chunk whose last step truncates is only "cut" if it ends before the chunk's end.
    cut = ended_by_trunc & (last < h - 1)
    valid = ~cut if on_truncation == "mask" else torch.ones_like(cut)
    return ChunkReturn(returns=returns, discount=discount, last=last, length=last + 1, valid=valid)


def intra_chunk_returns(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One n-step target per prefix ``k = 1..h`` of a chunk (AC3's intra-chunk n-step returns).

    ``y_k = sum_{j<k} gamma^j r_{t+j} + gamma^k (1 - term) V(s_{t+k})``; once the episode ended at
    step ``e < k``, ``y_k`` equals ``y_{e+1}`` (it bootstraps from the final observation of step
    ``e`` on truncation, nothing on termination).

    Args:
        rewards, terminated, truncated: ``[B, h]`` as in :func:`chunk_return`.
        bootstrap: ``[B, h]`` ``V`` of the true next observation of each step (``final_obs`` where done).
        gamma: discount.

    Returns:
        ``(targets [B, h], executed [B, h] bool)``: ``executed[:, k-1]`` is False where the prefix
        of length ``k`` reaches past the episode end (its target repeats the last executed one).
    """
    check_window(rewards, terminated, truncated, gamma, "[B, h]")
    if bootstrap.shape != rewards.shape:
        raise ValueError(f"bootstrap must be [B, h] = {tuple(rewards.shape)}, got {tuple(bootstrap.shape)}")
    h = rewards.shape[1]
    alive = alive_mask(terminated, truncated).to(rewards.dtype)
    powers = gamma ** torch.arange(h, device=rewards.device, dtype=rewards.dtype)
    partial = torch.cumsum(rewards * alive * powers, dim=1)  # sum_{j<=k-1}
    boot = gamma * powers * (~terminated).to(rewards.dtype) * bootstrap  # gamma^k * V(s_{t+k})
    own = partial + boot
    # Prefixes beyond the end repeat the target of the ending step.
    last = (alive.sum(1) - 1).long()
    steps = torch.arange(h, device=rewards.device)[None, :]
    index = torch.minimum(steps.expand(rewards.shape[0], -1), last[:, None])
    return own.gather(1, index), steps <= last[:, None]
