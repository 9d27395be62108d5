"""A task's control settings: robot.yaml ``control`` overrides and the training-time rate limit.

``TaskCfg.control`` may replace robot.yaml's ``action_type`` / ``action_scale`` and may add
``max_step_change``: the most (rad) a joint target may move per policy step. The deploy safety layer
(robot.yaml ``safety.max_step_change``, applied by the policy node every tick) rate-limits a policy's
targets on the robot; training under the same limit lets the policy learn the robot it will meet
instead of one that jumps (docs/tasks.md, "Training under the deploy rate limit").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from sim.errors import SimInputError
from sim.robots import RobotConfig
from sim.robots.config import ACTION_TYPES

ROBOT_CONTROL_KEYS = ("action_type", "action_scale")
"""robot.yaml ``control`` fields a task may replace."""


def _finite_positive(value: Any) -> bool:
    """A real number (not a bool), finite and > 0."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0


def override_control(robot: RobotConfig, changes: dict[str, Any]) -> RobotConfig:
    """``robot`` with fields of its ``control`` replaced (``action_type``, ``action_scale``)."""
    if not changes:
        return robot
    unknown = sorted(set(changes) - set(ROBOT_CONTROL_KEYS))
    if unknown:
        raise ValueError(f"TaskCfg.control has unknown key {unknown[0]!r}; valid keys: "
                         f"{sorted((*ROBOT_CONTROL_KEYS, 'max_step_change'))}")
    if changes.get("action_type", robot.control.action_type) not in ACTION_TYPES:
        raise ValueError(f"TaskCfg.control action_type {changes['action_type']!r}: use one of {ACTION_TYPES}")
    scale = changes.get("action_scale", robot.control.action_scale)
    if not _finite_positive(scale):
        raise SimInputError(f"task setting control.action_scale = {scale!r} must be a finite number > 0 (rad per "
                            "unit action)")
    return dataclasses.replace(robot, control=dataclasses.replace(robot.control, **changes))


def split_rate_limit(changes: dict[str, Any]) -> tuple[float | None, dict[str, Any]]:
    """``(max_step_change or None, the robot.yaml overrides)`` of a ``TaskCfg.control`` mapping.

    Raises:
        SimInputError: ``max_step_change`` is not a finite number > 0 (rad per policy step).
    """
    rest = {key: value for key, value in changes.items() if key != "max_step_change"}
    limit = changes.get("max_step_change")
    if limit is None:
        return None, rest
    if not _finite_positive(limit):
        raise SimInputError(f"task setting control.max_step_change = {limit!r} must be a finite number > 0 "
                            "(rad per policy step; robot.yaml's safety.max_step_change to train under the "
                            "deploy limit), or left out for no limit")
    return float(limit), rest


def rate_limit(target: torch.Tensor, last: torch.Tensor, max_step: float) -> torch.Tensor:
    """``target`` ``[N, A]`` moved at most ``max_step`` per element from ``last`` ``[N, A]``.

    The sim twin of ``robot_rl.deploy.safety.rate_limit`` (sim never imports robot_rl).
    """
    return last + torch.clamp(target - last, -max_step, max_step)
