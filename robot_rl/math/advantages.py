"""Generalised advantage estimation with exact time-out bootstrapping, and per-group normalisation.

Shapes: ``T`` rollout steps, ``N`` envs, optional trailing ``G`` reward groups.
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) over a rollout.

    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``, where ``s'_t`` is the true
    successor of ``s_t``: the pre-reset final observation where the episode ended, so a
    time-limit truncation bootstraps from the state it was cut at and a termination does not.

    Args:
        rewards: ``[T, N]`` or ``[T, N, G]``.
        values: ``V(s_t)``, same shape as ``rewards``.
        next_values: ``V(s'_t)``, same shape (``values[t + 1]`` where not done, the value of the
            final observation where done, the bootstrap value at ``t = T - 1``).
        terminated: ``[T, N]`` bool, the episode ended in a terminal state at step ``t``.
        done: ``[T, N]`` bool, terminated or truncated at step ``t``.
        gamma, lam: discount and GAE lambda in ``[0, 1]``.

    Returns:
        ``(advantages, returns)`` with the shape of ``rewards``; ``returns = advantages + values``.
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gae needs gamma and lam in [0, 1], got gamma={gamma}, lam={lam}")
    if rewards.shape != values.shape or values.shape != next_values.shape:
        raise ValueError(
            f"gae shapes differ: rewards {list(rewards.shape)}, values {list(values.shape)}, "
            f"next_values {list(next_values.shape)}"
        )
    if terminated.shape != rewards.shape[:2] or done.shape != rewards.shape[:2]:
        raise ValueError(
            f"terminated {list(terminated.shape)} and done {list(done.shape)} must be [T, N] = "
            f"{list(rewards.shape[:2])}"
        )
    extra = (1,) * (rewards.dim() - 2)
    not_term = (~terminated).to(rewards.dtype).reshape(*terminated.shape, *extra)
    not_done = (~done).to(rewards.dtype).reshape(*done.shape, *extra)
    deltas = rewards + gamma * not_term * next_values - values
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def normalize_per_group(
    advantages: torch.Tensor, weights: torch.Tensor | None = None, eps: float = 1e-8
) -> torch.Tensor:
    """Normalise each reward group's advantages to zero mean, unit std, then combine them.

    ``out = sum_g w_g * (A_g - mean(A_g)) / (std(A_g) + eps)`` — each group counts by its weight,
    not by the scale of its rewards (the multi-critic recipe). A ``[B]`` input is one group.

    Args:
        advantages: ``[B, G]`` (or ``[B]``).
        weights: ``[G]`` group weights (default: all ones).

    Returns:
        ``[B]`` combined advantages.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.dim() != 2:
        raise ValueError(f"advantages must be [B, G] or [B], got {list(advantages.shape)}")
    G = advantages.shape[1]
    if weights is None:
        weights = torch.ones(G, dtype=advantages.dtype, device=advantages.device)
    if weights.shape != (G,):
        raise ValueError(f"weights must be [G] = [{G}], got {list(weights.shape)}")
    mean = advantages.mean(0)
    std = advantages.std(0, unbiased=False) if advantages.shape[0] > 1 else torch.ones_like(mean)
    return ((advantages - mean) / (std + eps) * weights).sum(-1)
