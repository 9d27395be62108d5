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


def alive_mask(terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """``[B, h]`` float: 1 for steps executed in the chunk's episode (up to and including the first end)."""
    ended = (terminated | truncated).float()
    return ((torch.cumsum(ended, dim=1) - ended) == 0).float()


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


@dataclass
class ChunkBatch:
    """Chunks sampled from a replay buffer, with their chunk returns.

    Attributes:
        obs: observation groups at the chunk's first step, each ``[B, dim]``.
        actions: ``[B, h, A]`` stored actions; steps after the episode end repeat the last executed one.
        rewards: ``[B, h]`` stored rewards (zero after the end).
        target: :class:`ChunkReturn` of the chunk.
        next_obs: bootstrap observation groups (true next obs of step ``target.last``), each ``[B, dim]``.
        terminated, truncated: ``[B, h]`` bool flags of the chunk's steps as :func:`chunk_return` saw them
            (the newest stored step counts as truncated), or None.
        rows, env: where the chunk lies in the buffer: ``[B, h]`` ring rows of its steps (clamped at the
            newest) and ``[B]`` env index, or None (e.g. to look up per-step next observations).
    """

    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    target: ChunkReturn
    next_obs: dict[str, torch.Tensor]
    terminated: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    env: torch.Tensor | None = None


def sample_chunks(
    buffer: object,
    batch_size: int,
    chunk_len: int,
    gamma: float,
    on_truncation: OnTruncation = "bootstrap",
    generator: torch.Generator | None = None,
) -> ChunkBatch:
    """Sample ``batch_size`` chunks of ``chunk_len`` consecutive steps of one env from a replay buffer.

    ``buffer`` is a :class:`robot_rl.data.replay_buffer.ReplayBuffer` (read only: its ``obs``,
    ``next_obs``, ``action``, ``reward``, ``terminated``, ``truncated``, ``position``, ``size``).
    The newest stored step ends a window like a truncation.
    """
    if chunk_len < 1 or batch_size < 1:
        raise ValueError(f"chunk_len and batch_size must be >= 1, got {chunk_len} and {batch_size}")
    size, capacity = buffer.size, buffer.capacity
    if size == 0:
        raise RuntimeError("cannot sample chunks from an empty replay buffer: add transitions first")
    device = buffer.reward.device
    gen_device = generator.device if generator is not None else device
    oldest = (buffer.position - size) % capacity
    offset = torch.randint(0, size, (batch_size,), generator=generator, device=gen_device).to(device)
    env = torch.randint(0, buffer.num_envs, (batch_size,), generator=generator, device=gen_device).to(device)
    window = offset[:, None] + torch.arange(chunk_len, device=device)[None, :]  # [B, h]
    stored = window < size
    rows = (oldest + window.clamp(max=size - 1)) % capacity
    envs = env[:, None].expand(-1, chunk_len)
    terminated = buffer.terminated[rows, envs] & stored
    truncated = (buffer.truncated[rows, envs] | (window == size - 1)) & stored
    rewards = buffer.reward[rows, envs] * stored
    target = chunk_return(rewards, terminated, truncated, gamma, on_truncation)
    executed = torch.arange(chunk_len, device=device)[None, :] <= target.last[:, None]
    action_rows = torch.where(executed, rows, rows.gather(1, target.last[:, None]))
    first = rows[:, 0]
    boot_row = rows.gather(1, target.last[:, None]).squeeze(1)
    return ChunkBatch(
        obs={k: v[first, env] for k, v in buffer.obs.items()},
        actions=buffer.action[action_rows, envs],
        rewards=rewards * executed,
        target=target,
        next_obs={k: v[boot_row, env] for k, v in buffer.next_obs.items()},
        terminated=terminated,
        truncated=truncated,
        rows=rows,
        env=env,
    )


@dataclass
class WindowBatch:
    """Windows of ``T`` consecutive steps of one env, time-major, for latent-rollout training (TD-MPC2).

    Attributes:
        obs: observation groups ``[T + 1, B, dim]``: the first step's observation, then the true next
            observation of every step (``final_obs`` where that step ended its episode).
        actions: ``[T, B, A]``; rewards: ``[T, B]``; terminated: ``[T, B]`` bool.
        alive: ``[T, B]`` bool, the step is stored and belongs to the window's episode (steps up to and
            including the first termination or truncation); later steps must stay out of every loss.
    """

    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    alive: torch.Tensor


def sample_windows(
    buffer: object, batch_size: int, horizon: int, generator: torch.Generator | None = None
) -> WindowBatch:
    """Sample ``batch_size`` windows of ``horizon`` consecutive steps of one env from a replay buffer.

    Unlike :func:`sample_chunks` the newest stored step is a normal step here: its true next observation
    is stored, so a latent rollout may pass through it; steps beyond it are not stored (``alive`` False).
    """
    if horizon < 1 or batch_size < 1:
        raise ValueError(f"horizon and batch_size must be >= 1, got {horizon} and {batch_size}")
    size, capacity = buffer.size, buffer.capacity
    if size == 0:
        raise RuntimeError("cannot sample windows from an empty replay buffer: add transitions first")
    device = buffer.reward.device
    gen_device = generator.device if generator is not None else device
    oldest = (buffer.position - size) % capacity
    offset = torch.randint(0, size, (batch_size,), generator=generator, device=gen_device).to(device)
    env = torch.randint(0, buffer.num_envs, (batch_size,), generator=generator, device=gen_device).to(device)
    window = offset[None, :] + torch.arange(horizon, device=device)[:, None]  # [T, B]
    stored = window < size
    rows = (oldest + window.clamp(max=size - 1)) % capacity
    envs = env[None, :].expand(horizon, -1)
    terminated = buffer.terminated[rows, envs] & stored
    ended = (terminated | buffer.truncated[rows, envs]).float()
    alive = ((torch.cumsum(ended, dim=0) - ended) == 0) & stored
    obs = {k: torch.cat([v[rows[:1], envs[:1]], buffer.next_obs[k][rows, envs]]) for k, v in buffer.obs.items()}
    return WindowBatch(obs=obs, actions=buffer.action[rows, envs], rewards=buffer.reward[rows, envs],
                       terminated=terminated, alive=alive)
