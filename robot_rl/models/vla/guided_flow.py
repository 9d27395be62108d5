"""Critic-guided flow matching: regress the action expert toward velocity targets shifted by the critic's
action gradient, with a trust region to the frozen SFT expert (Q-guided flow / Q-VGM-style value-gradient
guidance; no backpropagation through the denoising chain).

In LeRobot's convention (``x_t = t * n + (1 - t) * a``, target velocity ``n - a``;
:mod:`robot_rl.models.vla.flow`), with ``a`` a data or SFT chunk and ``g = grad_a Q(s, a)``::

    a'    = a + eta * g                      (or eta * g / ||g||, per sample, with ``normalize``)
    x_t'  = t * n + (1 - t) * a'
    loss  = mean || v_theta(x_t', t) - (n - a') ||^2  +  beta * mean || v_theta(x_t', t) - v_sft(x_t', t) ||^2

``a'`` is a constant of the loss (the critic's gradient is taken once, detached), so the update is a plain
flow-matching regression: nothing is backpropagated through sampling. Pointwise the regression's minimiser is
``v* = (E[n - a' | x_t'] + beta * v_sft(x_t')) / (1 + beta)``; for a point target ``a`` whose SFT field is
exact, the trained flow then samples ``a + eta * g / (1 + beta)``.

Shapes: ``B`` batch, ``*`` the sample shape (``[H, A]`` for chunks), ``t [B]``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robot_rl.models.vla import flow

ActionValue = Callable[[torch.Tensor], torch.Tensor]
"""``q(action [B, *]) -> [B]``: a critic at fixed observations, as a function of the action."""


def action_gradient(q: ActionValue, action: torch.Tensor) -> torch.Tensor:
    """``grad_a Q(s, a)`` ``[B, *]`` at ``action [B, *]`` (detached; the critic's parameters get no gradient)."""
    a = action.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(q(a).sum(), a)
    return grad


def guided_action(action: torch.Tensor, grad: torch.Tensor, eta: float, normalize: bool = False,
                  eps: float = 1e-6) -> torch.Tensor:
    """``a' = a + eta * g`` ``[B, *]``; with ``normalize``, ``g / max(||g||, eps)`` per sample (a step of length
    ``eta`` in the ascent direction, whatever the critic's scale)."""
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    if normalize:
        norm = grad.flatten(1).norm(dim=1).clamp_min(eps)
        grad = grad / norm.reshape(-1, *([1] * (grad.dim() - 1)))
    return action + eta * grad


def guided_flow_loss(velocity: flow.Velocity, sft_velocity: flow.Velocity, shifted: torch.Tensor,
                     noise: torch.Tensor, t: torch.Tensor, beta: float, mask: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The module docstring's loss for shifted chunks ``a'`` ``[B, *]`` (from :func:`guided_action`, in the
    flow's standardised space), ``noise [B, *]``, ``t [B]``; ``(loss, {"flow": ..., "trust": ...})``.

    ``velocity`` is the expert being trained, ``sft_velocity`` the frozen SFT expert (run without gradient);
    ``mask`` bool ``[B, H]`` keeps the real chunk steps, as :func:`flow.flow_loss`.
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    shifted = shifted.detach()
    x_t = flow.interpolate(shifted, noise, t)
    predicted = velocity(x_t, t)
    fit = flow.flow_loss(predicted, shifted, noise, mask)
    if beta == 0:
        return fit, {"flow": fit.detach(), "trust": torch.zeros_like(fit)}
    with torch.no_grad():
        reference = sft_velocity(x_t, t)
    # flow_loss(p, a, n) regresses p on n - a: with a = 0, n = reference it is the squared distance to reference.
    trust = flow.flow_loss(predicted, torch.zeros_like(reference), reference, mask)
    return fit + beta * trust, {"flow": fit.detach(), "trust": trust.detach()}
