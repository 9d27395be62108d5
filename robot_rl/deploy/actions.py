"""The one owner of the raw-action <-> robot-units mapping (numpy only).

A policy outputs a raw action ``a`` in ``[clip_low, clip_high]^A`` (``[-1, 1]``); the robot receives
joint targets ``target = offset + scale * clip(a)`` (:class:`~robot_rl.deploy.artifact.ActionSpec`).
:func:`action_spec` builds the spec of a robot's control settings (:func:`robot_action_spec` of a loaded robot),
:func:`to_targets` applies it and :func:`to_raw` inverts it. Twins that cannot import this module, each pinned
equal by a test (``tests/test_action_maps.py``): ``sim.env.TaskEnv.actuator_command`` / ``action_for_targets``
(``sim`` never imports ``robot_rl``) and the exported graph's :class:`robot_rl.export.PolicyHead`
(torch, inside ONNX).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from robot_rl.deploy.artifact import ACTION_TYPES, ActionSpec, ArtifactError


def action_spec(
    action_type: str,
    action_scale: float | Sequence[float],
    default_joint_pos: Sequence[float],
    joint_lower: Sequence[float] | None = None,
    joint_upper: Sequence[float] | None = None,
) -> ActionSpec:
    """The :class:`ActionSpec` of a robot's ``control`` (robot.yaml), ``A`` joints in action order.

    ``joint_position_delta_default``: offset = ``default_joint_pos``, scale = ``action_scale`` (a
    number or ``[A]``). ``joint_position``: ``[-1, 1]`` onto ``[joint_lower, joint_upper]``, so offset =
    mid-range and scale = half-range (both limits required, ``action_scale`` unused).

    Raises:
        ArtifactError: any other ``action_type`` (e.g. ``joint_torque``: no joint targets).
    """
    A = len(default_joint_pos)
    if action_type == "joint_position":
        if joint_lower is None or joint_upper is None:
            raise ValueError("action_type 'joint_position' maps [-1, 1] onto the joint range: pass "
                             "joint_lower and joint_upper (robot.yaml limits, action order).")
        lo, hi = np.asarray(joint_lower, dtype=np.float64), np.asarray(joint_upper, dtype=np.float64)
        return ActionSpec(type=action_type, scale=((hi - lo) / 2).tolist(), offset=((lo + hi) / 2).tolist())
    if action_type not in ACTION_TYPES:
        raise ArtifactError(f"must be one of {ACTION_TYPES}: an artifact outputs joint targets", key="action.type",
                            value=action_type, fix="export a position-controlled policy")
    scale = [float(action_scale)] * A if np.isscalar(action_scale) else [float(s) for s in action_scale]
    return ActionSpec(type=action_type, scale=scale, offset=[float(x) for x in default_joint_pos])


def robot_action_spec(robot: Any) -> ActionSpec:
    """:func:`action_spec` of a loaded robot (``sim.robots`` ``RobotConfig``: its ``control`` and ``joints`` in
    action order), as an exported artifact carries it."""
    joints = robot.joints
    return action_spec(robot.control.action_type, robot.control.action_scale, [j.default for j in joints],
                       [j.lower for j in joints], [j.upper for j in joints])


def to_targets(spec: ActionSpec, raw: np.ndarray) -> np.ndarray:
    """``[..., A]`` float64 joint targets of ``raw`` ``[..., A]``: ``offset + scale * clip(raw)``."""
    clipped = np.clip(np.asarray(raw, dtype=np.float64), spec.clip_low, spec.clip_high)
    return np.asarray(spec.offset) + np.asarray(spec.scale) * clipped


def to_raw(spec: ActionSpec, target: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Raw action ``[..., A]`` whose joint targets are ``target`` ``[..., A]``: ``clip((target - offset) / scale)``.

    Exact inverse of :func:`to_targets` inside the clip range; a target beyond ``offset +- scale``
    maps to the nearest reachable action. ``out`` (float64 ``[..., A]``) avoids allocating.
    """
    raw = np.subtract(target, spec.offset, out=out, dtype=np.float64)
    np.divide(raw, spec.scale, out=raw)
    return np.clip(raw, spec.clip_low, spec.clip_high, out=raw)
