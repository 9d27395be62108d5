"""Flow matching over action chunks, in LeRobot's convention (pi0 / SmolVLA).

With an action chunk ``a`` and Gaussian noise ``n`` of the same shape, the path is
``x_t = t * n + (1 - t) * a`` for ``t`` in [0, 1]: ``t = 1`` is pure noise, ``t = 0`` the action. The
velocity ``dx_t/dt = n - a`` is the regression target, and sampling integrates a learned velocity with
Euler steps from ``t = 1`` down to ``t = 0`` (``x <- x - v / steps``). Training times follow LeRobot:
``t = 0.999 * Beta(1.5, 1) + 0.001``, which leans towards the noisy end. Pure functions; shapes are
``[B, *]`` for samples and ``[B]`` for times.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

BETA_ALPHA = 1.5
"""LeRobot's ``Beta(1.5, 1.0)`` time distribution."""
TIME_SCALE, TIME_OFFSET = 0.999, 0.001
"""``t = TIME_SCALE * beta + TIME_OFFSET`` keeps t away from 0."""

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``velocity(x_t [B, *], t [B]) -> [B, *]``."""


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t [B]`` viewed as ``[B, 1, ..., 1]`` to broadcast against ``like [B, *]``."""
    return t.reshape(-1, *([1] * (like.dim() - 1)))


def sample_time(batch: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
                ) -> torch.Tensor:
    """``[batch]`` times ``0.999 * Beta(1.5, 1) + 0.001``.

    ``Beta(a, 1)`` has CDF ``u ** a`` on [0, 1], so it is drawn exactly as ``U ** (1 / a)`` with ``U``
    uniform (one uniform per sample: reproducible under ``generator``).
    """
    u = torch.rand(batch, generator=generator, device=device)
    return TIME_SCALE * u.pow(1.0 / BETA_ALPHA) + TIME_OFFSET


def interpolate(action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``x_t = t * noise + (1 - t) * action``; action, noise ``[B, *]``, t ``[B]`` -> ``[B, *]``."""
    t = _expand(t, action)
    return t * noise + (1.0 - t) * action


def target_velocity(action: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``dx_t/dt = noise - action`` ``[B, *]``, the same at every t."""
    return noise - action


def flow_loss(predicted: torch.Tensor, action: torch.Tensor, noise: torch.Tensor,
              mask: torch.Tensor | None = None, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error of ``predicted`` velocity ``[B, H, A]`` against :func:`target_velocity`.

    ``mask`` bool ``[B, H]`` (optional) keeps only the real chunk steps (``~action_is_pad``), as LeRobot drops
    padded actions; the mean is over kept elements. ``weight [B]`` (optional, >= 0) weighs each sample's elements
    (a weighted mean: ``sum(w * err) / sum(w)`` over kept elements; 0 where every weight is 0).
    """
    err = (predicted - target_velocity(action, noise)).pow(2)
    if mask is None and weight is None:
        return err.mean()
    keep = torch.ones_like(err) if mask is None else mask.unsqueeze(-1).to(err.dtype).expand_as(err)
    if weight is not None:
        keep = keep * weight.to(err.dtype).reshape(-1, *([1] * (err.dim() - 1)))
    return (err * keep).sum() / keep.sum().clamp_min(1e-8 if weight is not None else 1.0)


def euler_sample(velocity: Velocity, noise: torch.Tensor, steps: int) -> torch.Tensor:
    """Integrate ``dx/dt = velocity(x, t)`` from ``x_1 = noise`` at t = 1 to t = 0 in ``steps`` Euler steps.

    Deterministic given ``noise`` ``[B, *]``; evaluates the velocity at t = 1, 1 - 1/steps, ..., 1/steps.
    Returns ``x_0`` ``[B, *]``.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    x = noise
    dt = 1.0 / steps
    for k in range(steps):
        t = torch.full((noise.shape[0],), 1.0 - k * dt, dtype=noise.dtype, device=noise.device)
        x = x - dt * velocity(x, t)
    return x
