"""PPO's clipped surrogate objective as a pure function (Schulman et al., "Proximal Policy Optimization
Algorithms", 2017, eq. 7), for any policy whose log-likelihood can be evaluated: a Gaussian actor, or a flow
policy's denoising chain (:mod:`robot_rl.math.flow_sde`).

Shapes: ``B`` samples.
"""

from __future__ import annotations

import torch


def clipped_surrogate(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, ratio [B])``: ``loss = mean(max(-A * r, -A * clip(r, 1 - clip, 1 + clip)))``, ``r = exp(lp - lp_old)``.

    Args:
        log_prob: ``[B]`` log-likelihood of the taken actions under the policy being trained (differentiable).
        old_log_prob: ``[B]`` the same under the policy that acted (detached).
        advantages: ``[B]`` advantage estimates.
        clip: ``epsilon > 0``.
    """
    if clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if not log_prob.shape == old_log_prob.shape == advantages.shape:
        raise ValueError(f"log_prob {list(log_prob.shape)}, old_log_prob {list(old_log_prob.shape)} and "
                         f"advantages {list(advantages.shape)} must have one shape")
    ratio = torch.exp(log_prob - old_log_prob)
    loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip, 1.0 + clip)).mean()
    return loss, ratio
