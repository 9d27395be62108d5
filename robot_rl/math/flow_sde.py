"""Stochastic flow sampling with per-step Gaussian log-likelihoods: what PPO on a flow policy needs.

The flow follows LeRobot's convention (``robot_rl.models.vla.flow``): ``x_t = t * noise + (1 - t) * a``,
velocity ``v = noise - a``, sampling from ``t = 1`` down to ``t = 0`` on the grid ``t_k = 1 - k / K``,
``k = 0..K-1``, step ``dt = 1 / K``. The deterministic Euler step ``x <- x - dt * v(x, t)`` has no density;
here every step is Gaussian, ``x_{k+1} ~ N(mean_k, std_k^2)`` (elementwise), so a whole denoising chain
``x_0 = noise, x_1, ..., x_K = action`` has a log-likelihood ``sum_k log N(x_{k+1}; mean_k, std_k^2)``
under any velocity field, and PPO's ratio is ``exp(log p_new(chain) - log p_old(chain))``
(pi-RL: Chen et al., "piRL: Online RL Fine-tuning for Flow-based Vision-Language-Action Models", 2025;
RLinf's ``flow-sde`` and ``flow-noise``).

Two step rules, chosen by the ``noise`` argument:

- ``noise = a`` (a float, **flow-SDE**; Flow-GRPO, Liu et al. 2025, eq. 9, as pi-RL uses it): the reverse-time
  SDE with the ODE's marginals, ``dx = [v + sigma_t^2 / (2 t) * (x + (1 - t) v)] dt + sigma_t dW`` with
  ``sigma_t = a * sqrt(t / (1 - t))``, integrated by Euler-Maruyama from ``t`` to ``t - dt``::

      mean = x - dt * [v + sigma_t^2 / (2 t) * (x + (1 - t) * v)],    std = sigma_t * sqrt(dt)

  (the score of ``x_t`` is ``-(x + (1 - t) v) / t``; ``1 - t`` is floored at ``dt`` so the first step,
  ``t = 1``, has ``std = a``, as Flow-GRPO does). ``a = 0`` is the Euler ODE step exactly.
- ``noise = std_fn`` (a callable ``std_fn(x [B, *], t [B]) -> [B, *]``, **flow-noise**: a learned noise
  network): ``mean = x - dt * v``, ``std = std_fn(x, t)``.

Shapes: ``B`` batch, ``*`` the sample shape (``[H, A]`` for action chunks), ``K`` denoising steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``velocity(x_t [B, *], t [B]) -> [B, *]``."""
StepStd = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""flow-noise: ``std_fn(x_t [B, *], t [B]) -> [B, *]``, positive."""
Noise = float | StepStd
"""A flow-SDE noise level ``a >= 0`` or a flow-noise ``std_fn``."""

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class Chain:
    """A sampled denoising chain.

    Attributes:
        states: ``[B, K + 1, *]``: ``states[:, 0]`` the initial noise, ``states[:, K]`` the sample (the action).
        log_probs: ``[B, K]`` ``log N(states[:, k + 1]; mean_k, std_k^2)`` under the field that sampled it
            (summed over ``*``); ``None`` for a noiseless (``a = 0``) chain, which has no density.
    """

    states: torch.Tensor
    log_probs: torch.Tensor | None

    @property
    def sample(self) -> torch.Tensor:
        """``[B, *]`` the chain's end, ``x_K``."""
        return self.states[:, -1]

    @property
    def log_prob(self) -> torch.Tensor | None:
        """``[B]`` the whole chain's log-likelihood, ``log_probs.sum(1)`` (``None`` when noiseless)."""
        return None if self.log_probs is None else self.log_probs.sum(1)


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t [B]`` as ``[B, 1, ..., 1]`` against ``like [B, *]``."""
    return t.reshape(-1, *([1] * (like.dim() - 1)))


def step_times(steps: int, batch: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
               ) -> torch.Tensor:
    """``[K, B]`` the times ``t_k = 1 - k / K`` at which step ``k`` evaluates the velocity (flow.euler_sample's)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    dt = 1.0 / steps
    t = torch.tensor([1.0 - k * dt for k in range(steps)], dtype=dtype, device=device)
    return t[:, None].expand(steps, batch)


def sde_sigma(t: torch.Tensor, dt: float, noise_level: float) -> torch.Tensor:
    """flow-SDE ``sigma_t = a * sqrt(t / max(1 - t, dt))`` ``[B]`` (the floor keeps ``t = 1`` finite)."""
    return noise_level * (t / (1.0 - t).clamp_min(dt)).sqrt()


def step_distribution(x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, dt: float, noise: Noise
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, std)`` ``[B, *]`` of ``x_{t - dt}`` given ``x = x_t`` ``[B, *]``, its velocity ``v`` and ``t [B]``
    (the module docstring's two rules)."""
    if callable(noise):
        return x - dt * v, noise(x, t)
    if noise < 0:
        raise ValueError(f"the flow-SDE noise level must be >= 0, got {noise}")
    sigma = _expand(sde_sigma(t, dt, noise), x)
    tt = _expand(t, x)
    drift = v + sigma.pow(2) / (2.0 * tt) * (x + (1.0 - tt) * v)
    return x - dt * drift, (sigma * math.sqrt(dt)).expand_as(x)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``log N(x; mean, diag(std^2))`` ``[B]``, summed over every dim after the first (all ``[B, *]``)."""
    z = (x - mean) / std
    return -(0.5 * z.pow(2) + std.log() + _HALF_LOG_2PI).flatten(1).sum(1)


def sample_chain(velocity: Velocity, noise_sample: torch.Tensor, steps: int, noise: Noise,
                 generator: torch.Generator | None = None, sde_step: torch.Tensor | None = None) -> Chain:
    """Denoise ``noise_sample`` ``[B, *]`` (t = 1) to t = 0 in ``steps`` Gaussian steps; every state and its
    log-likelihood under ``velocity`` (:class:`Chain`). ``noise = 0.0`` reproduces ``flow.euler_sample``.

    ``sde_step`` ``[B]`` (int, in ``[0, steps)``): only that step of each chain is Gaussian, the others are the
    Euler (ODE) step, so ``log_probs`` is 0 except at it (RLinf's mixed ODE-SDE sampling, its default for flow PPO:
    one step's likelihood, :func:`step_log_prob`, instead of the whole chain's).

    A rollout runs it under ``torch.no_grad()`` and keeps ``states``; the update re-scores them with
    :func:`chain_log_prob` (or :func:`step_log_prob`) under the field being trained."""
    times = step_times(steps, noise_sample.shape[0], noise_sample.dtype, noise_sample.device)
    dt = 1.0 / steps
    noiseless = not callable(noise) and noise == 0
    x, states, log_probs = noise_sample, [noise_sample], []
    for k, t in enumerate(times):
        v = velocity(x, t)
        mean, std = step_distribution(x, v, t, dt, noise)
        if noiseless:
            x = mean
        else:
            eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
            x_sde = mean + std * eps
            if sde_step is None:
                x = x_sde
                log_probs.append(gaussian_log_prob(x, mean, std))
            else:
                here = sde_step == k
                x = torch.where(_expand(here, x), x_sde, x - dt * v)
                log_probs.append(torch.where(here, gaussian_log_prob(x, mean, std), 0.0))
        states.append(x)
    return Chain(torch.stack(states, dim=1), None if noiseless else torch.stack(log_probs, dim=1))


def step_log_prob(velocity: Velocity, states: torch.Tensor, noise: Noise, step: torch.Tensor) -> torch.Tensor:
    """``[B, *]`` elementwise ``log N(states[:, k + 1]; mean_k, std_k^2)`` at step ``k = step[b]`` of each recorded
    chain ``states [B, K + 1, *]`` under ``velocity`` (one velocity call): the per-element likelihood PPO's ratio
    reads when only that step was Gaussian (``sample_chain(..., sde_step=step)``). Differentiable like
    :func:`chain_log_prob`; ``.flatten(1).sum(1)`` is that step's joint log-likelihood."""
    if not callable(noise) and noise <= 0:
        raise ValueError(f"a step's likelihood needs noise > 0 (a flow-SDE level or a std_fn), got {noise}")
    steps, rows = states.shape[1] - 1, torch.arange(states.shape[0], device=states.device)
    t = step_times(steps, 1, states.dtype, states.device)[:, 0][step]  # the sampler's own times, bit for bit
    x, after = states[rows, step], states[rows, step + 1]
    mean, std = step_distribution(x, velocity(x, t), t, 1.0 / steps, noise)
    return -(0.5 * ((after - mean) / std).pow(2) + std.log() + _HALF_LOG_2PI)


def chain_log_prob(velocity: Velocity, states: torch.Tensor, noise: Noise) -> torch.Tensor:
    """``[B, K]`` per-step log-likelihoods of recorded chains ``states`` ``[B, K + 1, *]`` under ``velocity``.

    Differentiable in ``velocity``'s (and ``std_fn``'s) parameters; ``.sum(1)`` is the chain's log-likelihood.
    A noiseless rule (``noise = 0.0``) has no density and is refused.
    """
    if not callable(noise) and noise <= 0:
        raise ValueError(f"a chain's likelihood needs noise > 0 (a flow-SDE level or a std_fn), got {noise}")
    steps = states.shape[1] - 1
    times = step_times(steps, states.shape[0], states.dtype, states.device)
    dt = 1.0 / steps
    out = []
    for k, t in enumerate(times):
        x = states[:, k]
        mean, std = step_distribution(x, velocity(x, t), t, dt, noise)
        out.append(gaussian_log_prob(states[:, k + 1], mean, std))
    return torch.stack(out, dim=1)
