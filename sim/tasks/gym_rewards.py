"""Batched reward, health and position terms of gymnasium's MuJoCo locomotion envs (v5).

Small pure functions over ``[N, ...]`` tensors, each the batched form of one line of
``gymnasium/envs/mujoco/{half_cheetah,hopper,walker2d,ant,humanoid}_v5.py``. They compute in the
dtype they are given (the env passes float64, as gymnasium computes, and casts at the end).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Range = tuple[float, float]


@dataclass(frozen=True)
class HealthyRule:
    """When a gymnasium locomotion robot is healthy (not fallen); ``None`` disables a check.

    Attributes:
        z_index: index into ``qpos`` of the height checked against ``z_range``
            (1 for the planar Hopper/Walker2d ``rootz``, 2 for Ant/Humanoid free joints).
        z_range: healthy height interval.
        z_inclusive: ``lo <= z <= hi`` (Ant) instead of ``lo < z < hi`` (the others).
        angle_range: open interval of ``qpos[:, 2]`` (the planar torso pitch of Hopper/Walker2d).
        state_range: open interval every entry of ``cat(qpos, qvel)[:, 2:]`` must lie in (Hopper).
        require_finite: every entry of ``cat(qpos, qvel)`` finite (Ant).
    """

    z_index: int
    z_range: Range
    z_inclusive: bool = False
    angle_range: Range | None = None
    state_range: Range | None = None
    require_finite: bool = False


def _open(x: torch.Tensor, bounds: Range) -> torch.Tensor:
    return (x > bounds[0]) & (x < bounds[1])


def is_healthy(qpos: torch.Tensor, qvel: torch.Tensor, rule: HealthyRule) -> torch.Tensor:
    """``[N]`` bool: the ``is_healthy`` property of gymnasium's v5 env under ``rule``.

    Args:
        qpos: ``[N, nq]`` generalized positions.
        qvel: ``[N, nv]`` generalized velocities.
    """
    z = qpos[:, rule.z_index]
    lo, hi = rule.z_range
    healthy = ((z >= lo) & (z <= hi)) if rule.z_inclusive else _open(z, rule.z_range)
    if rule.angle_range is not None:
        healthy &= _open(qpos[:, 2], rule.angle_range)
    state = torch.cat([qpos, qvel], dim=1)
    if rule.state_range is not None:
        healthy &= _open(state[:, 2:], rule.state_range).all(dim=1)
    if rule.require_finite:
        healthy &= torch.isfinite(state).all(dim=1)
    return healthy


def forward_velocity(before: torch.Tensor, after: torch.Tensor, dt: float) -> torch.Tensor:
    """``(after - before) / dt``: velocity from positions read before and after one step.

    Args:
        before: ``[N]`` or ``[N, 2]`` position before the step.
        after: same shape, position after the step.
    """
    return (after - before) / dt


def control_cost(action: torch.Tensor, weight: float) -> torch.Tensor:
    """``[N]`` ``weight * sum(action**2)`` over ``action`` ``[N, A]`` (a cost: positive)."""
    return weight * torch.sum(torch.square(action), dim=1)


def clip_contact_forces(cfrc_ext: torch.Tensor, force_range: Range) -> torch.Tensor:
    """``cfrc_ext`` ``[N, nbody, 6]`` clipped elementwise to ``force_range`` (Ant's ``contact_forces``)."""
    return torch.clamp(cfrc_ext, force_range[0], force_range[1])


def contact_cost(cfrc_ext: torch.Tensor, weight: float, force_range: Range, cost_range: Range) -> torch.Tensor:
    """``[N]`` ``clip(weight * sum(clip(cfrc_ext, force_range)**2), cost_range)`` (a cost).

    Ant clips the forces (``contact_force_range``), Humanoid the cost (``contact_cost_range``);
    an infinite range leaves that step out.

    Args:
        cfrc_ext: ``[N, nbody, 6]`` external contact wrench on each body (world body included).
    """
    forces = clip_contact_forces(cfrc_ext, force_range)
    cost = weight * torch.sum(torch.square(forces), dim=(1, 2))
    return torch.clamp(cost, cost_range[0], cost_range[1])


def mass_center_xy(body_mass: torch.Tensor, xipos: torch.Tensor) -> torch.Tensor:
    """``[N, 2]`` x, y of the centre of mass (Humanoid's ``mass_center``).

    Args:
        body_mass: ``[nbody]`` masses (world body included, mass 0).
        xipos: ``[N, nbody, 3]`` world positions of the bodies' centres of mass.
    """
    total = torch.einsum("b,nbj->nj", body_mass, xipos) / body_mass.sum()
    return total[:, :2]
