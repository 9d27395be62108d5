"""SAC's sampling and losses as pure functions (Haarnoja et al., "Soft Actor-Critic Algorithms and
Applications", 2018), for an actor over any bounded box: env actions, or a flow policy's initial noise
(DSRL, ``robot_rl.models.vla.steering``).

Shapes: ``B`` batch, ``*`` the action shape (``[A]``, or ``[H, A]`` for a noise chunk).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor, bound: float = 1.0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y [B, *], log_prob [B])`` for ``y = bound * tanh(u)``, ``u = mean + exp(log_std) * eps``.

    ``log_prob = sum(log N(u; mean, std^2) - log(bound * (1 - tanh(u)^2)))`` over every dim after the first, the
    change of variables exactly (``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2 u))``, stable at large
    ``|u|``). All inputs ``[B, *]``; reparameterised (differentiable in ``mean`` and ``log_std``).
    """
    if bound <= 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    u = mean + log_std.exp() * eps
    normal = -0.5 * eps.pow(2) - log_std - _HALF_LOG_2PI
    log_jacobian = math.log(bound) + 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return bound * torch.tanh(u), (normal - log_jacobian).flatten(1).sum(1)


def soft_target(reward: torch.Tensor, discount: torch.Tensor, next_q: torch.Tensor, next_log_prob: torch.Tensor,
                alpha: float | torch.Tensor, backup_entropy: bool = True) -> torch.Tensor:
    """TD target ``[B]``: ``r + discount * (Q'(s', a') - alpha * log pi(a'|s'))`` (no entropy term without
    ``backup_entropy``). ``reward``/``discount`` from :func:`robot_rl.math.td_targets.nstep_return`, all ``[B]``."""
    soft = next_q - alpha * next_log_prob if backup_entropy else next_q
    return reward + discount * soft


def actor_loss(q: torch.Tensor, log_prob: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """``mean(alpha * log pi(a|s) - Q(s, a))`` for reparameterised actions: ``q``, ``log_prob`` ``[B]``."""
    return (alpha * log_prob - q).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``-mean(log_alpha * (log pi + target_entropy))``: alpha grows while the entropy ``-log pi`` is below
    ``target_entropy``. ``log_prob`` ``[B]`` is detached here."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
