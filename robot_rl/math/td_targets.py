"""Temporal-difference targets: n-step returns, the C51 categorical projection, TQC truncation.

Pure functions on tensors; ``B`` is the batch size, ``n`` the n-step horizon, ``K`` the number of
C51 atoms, ``C`` the number of critics and ``M`` the number of quantiles per critic.

Episode boundaries follow the VecEnv contract (DESIGN.md, contract 1): a *terminated* step ends
the return with no bootstrap; a *truncated* step (time limit) ends the return too, but the
critic bootstraps from that step's true next observation (``final_obs``), never from the
post-reset observation of the next episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class NStepReturn:
    """An n-step return ready to be completed by a bootstrap value.

    The full TD target is ``returns + discount * V(next_obs[last])``.

    Attributes:
        returns: ``[B]`` discounted sum of rewards up to and including step ``last``.
        discount: ``[B]`` ``gamma ** (last + 1)``, or 0 where the window ended by termination.
        last: ``[B]`` long, the window step whose next observation is the bootstrap state.
    """

    returns: torch.Tensor
    discount: torch.Tensor
    last: torch.Tensor


def check_window(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float,
                 shape: str = "[B, n]") -> None:
    """Refuse rewards that are not ``shape`` (2-D), flags of another shape, or gamma outside [0, 1]."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be {shape}, got shape {tuple(rewards.shape)}")
    if terminated.shape != rewards.shape or truncated.shape != rewards.shape:
        raise ValueError(
            f"terminated {tuple(terminated.shape)} and truncated {tuple(truncated.shape)} must match "
            f"rewards {tuple(rewards.shape)}"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def nstep_return(
    rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float
) -> NStepReturn:
    """Discounted n-step returns over windows that stop at the first episode boundary.

    Args:
        rewards: ``[B, n]`` rewards of ``n`` consecutive steps of one env, oldest first.
        terminated: ``[B, n]`` bool, the step ended in a terminal state.
        truncated: ``[B, n]`` bool, the step hit the time limit (or the window must stop there,
            e.g. at the newest transition of a replay buffer).
        gamma: discount factor in ``[0, 1]``.

    Returns:
        :class:`NStepReturn`. Steps after the first boundary in a window are ignored.
    """
    check_window(rewards, terminated, truncated, gamma, "[B, n]")
    n = rewards.shape[1]
    ended = (terminated | truncated).to(rewards.dtype)
    # alive[:, k] = 1 while no boundary happened strictly before step k.
    before = torch.cumsum(ended, dim=1) - ended
    alive = (before == 0).to(rewards.dtype)
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)
    returns = (rewards * alive * powers).sum(dim=1)
    # last = first boundary step, or n - 1 if the window holds no boundary.
    last = (alive.sum(dim=1) - 1).long()
    last_terminated = terminated.gather(1, last[:, None]).squeeze(1)
    discount = gamma ** (last + 1).to(rewards.dtype) * (~last_terminated).to(rewards.dtype)
    return NStepReturn(returns=returns, discount=discount, last=last)


def categorical_projection(
    next_probs: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """Project the distribution ``returns + discount * Z`` back onto a fixed support (C51).

    Bellemare, Dabney & Munos, "A Distributional Perspective on Reinforcement Learning", 2017,
    Algorithm 1. Each shifted atom's mass is split between its two neighbouring atoms in
    proportion to proximity; atoms beyond the support are clipped to its ends.

    Args:
        next_probs: ``[B, K]`` probabilities of the bootstrap distribution ``Z`` (rows sum to 1).
        returns: ``[B]`` (n-step) rewards.
        discount: ``[B]`` bootstrap discount, 0 on termination.
        support: ``[K]`` evenly spaced atoms from ``v_min`` to ``v_max``.

    Returns:
        ``[B, K]`` target probabilities on ``support``.
    """
    num_atoms = support.shape[0]
    if next_probs.ndim != 2 or next_probs.shape[1] != num_atoms:
        raise ValueError(
            f"next_probs must be [B, {num_atoms}] to match the support, got {tuple(next_probs.shape)}"
        )
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    shifted = (returns[:, None] + discount[:, None] * support[None, :]).clamp(v_min, v_max)
    position = (shifted - v_min) / delta  # [B, K] fractional atom index
    lower = position.floor().long().clamp(0, num_atoms - 1)
    upper = position.ceil().long().clamp(0, num_atoms - 1)
    upper_weight = position - lower.to(position.dtype)
    # Where lower == upper the atom lands exactly on the support: all mass goes to it.
    lower_weight = torch.where(lower == upper, torch.ones_like(position), 1.0 - upper_weight)
    upper_weight = torch.where(lower == upper, torch.zeros_like(position), upper_weight)
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, next_probs * lower_weight)
    target.scatter_add_(1, upper, next_probs * upper_weight)
    return target


def truncate_quantiles(quantiles: torch.Tensor, drop_per_critic: int) -> torch.Tensor:
    """Pool the quantiles of all critics, sort them and drop the largest ones (TQC).

    Kuznetsov et al., "Controlling Overestimation Bias with Truncated Mixture of Continuous
    Distributional Quantile Critics", ICML 2020: keep the ``C * (M - d)`` smallest of the
    ``C * M`` pooled atoms.

    Args:
        quantiles: ``[B, C, M]`` quantile atoms of ``C`` critics.
        drop_per_critic: ``d``, atoms dropped per critic, ``0 <= d < M``.

    Returns:
        ``[B, C * (M - d)]`` the kept atoms, sorted ascending.
    """
    if quantiles.ndim != 3:
        raise ValueError(f"quantiles must be [B, C, M], got shape {tuple(quantiles.shape)}")
    _, num_critics, num_quantiles = quantiles.shape
    if not 0 <= drop_per_critic < num_quantiles:
        raise ValueError(
            f"drop_per_critic must be in [0, {num_quantiles - 1}] for {num_quantiles} quantiles per "
            f"critic, got {drop_per_critic}"
        )
    pooled, _ = quantiles.reshape(quantiles.shape[0], -1).sort(dim=1)
    keep = num_critics * (num_quantiles - drop_per_critic)
    return pooled[:, :keep]
