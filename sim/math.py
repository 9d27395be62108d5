"""Batched rotation helpers (quaternions are wxyz, as in MuJoCo) and the damped-least-squares IK step."""

from __future__ import annotations

import torch


def quat_rotate_inverse(quat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Rotate world vectors ``vec`` ``[N, 3]`` into the frames ``quat`` ``[N, 4]`` (wxyz)."""
    w, xyz = quat[:, :1], quat[:, 1:]
    t = 2.0 * torch.linalg.cross(xyz, vec, dim=1)
    return vec - w * t + torch.linalg.cross(xyz, t, dim=1)


def quat_rotate(quat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Rotate frame vectors ``vec`` ``[N, 3]`` by ``quat`` ``[N, 4]`` (wxyz) into the world."""
    w, xyz = quat[:, :1], quat[:, 1:]
    t = 2.0 * torch.linalg.cross(xyz, vec, dim=1)
    return vec + w * t + torch.linalg.cross(xyz, t, dim=1)


def yaw_from_quat(quat: torch.Tensor) -> torch.Tensor:
    """``[N]`` heading angle of frames ``quat`` ``[N, 4]`` (wxyz)."""
    w, x, y, z = quat.unbind(dim=1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def projected_gravity(quat: torch.Tensor) -> torch.Tensor:
    """``[N, 3]`` unit gravity direction seen in the frames ``quat`` (what an IMU's tilt gives)."""
    down = torch.zeros(quat.shape[0], 3, device=quat.device, dtype=quat.dtype)
    down[:, 2] = -1.0
    return quat_rotate_inverse(quat, down)


def dls_step(jac: torch.Tensor, error: torch.Tensor, damping: float) -> torch.Tensor:
    """Damped least squares: ``dq = J^T (J J^T + damping^2 I)^-1 e``.

    Args:
        jac: ``[N, k, J]`` task Jacobians.
        error: ``[N, k]`` task-space errors.
        damping: damping factor (m or rad), bounds ``|dq|`` near singularities.

    Returns:
        ``[N, J]`` joint displacement.
    """
    eye = torch.eye(jac.shape[1], dtype=jac.dtype, device=jac.device)
    jjt = jac @ jac.transpose(1, 2) + damping**2 * eye
    return (jac.transpose(1, 2) @ torch.linalg.solve(jjt, error.unsqueeze(2))).squeeze(2)


def clip_norm(vec: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``[N, k]`` rows of ``vec`` scaled down to norm at most ``max_norm``."""
    norm = torch.linalg.norm(vec, dim=1, keepdim=True).clamp_min(1e-9)
    return vec * torch.clamp(max_norm / norm, max=1.0)


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """``[n, 4]`` wxyz quaternion of a rotation by ``yaw [n]`` (rad) about the world z axis."""
    zero = torch.zeros_like(yaw)
    return torch.stack([torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)], dim=1)
