"""The safety layer between policy and robot, as pure functions (DESIGN.md, contract 4).

Every control tick the policy node calls :func:`safety_step` with the policy's joint targets and
the latest measured state; it returns the command to publish (or ``None``: publish nothing), the
next :class:`SafetyState` and the interventions made. Rules, in priority order:

1. nothing is ever sent before the first valid joint state and the first finite policy target
   (until then there is no command to hold: the driver keeps its own);
2. a latched e-stop holds the pose at the moment it latched (``hold``) or follows the measured
   pose (``damp``: zero position error, the joint PD only damps) until re-enabled;
3. disabled: nothing is sent;
4. stale state (no JointState for longer than the timeout): hold the last command sent, never a
   new one; when states resume, soft start again from the held pose;
5. NaN/Inf targets (or no target): hold the last command;
6. otherwise clamp to the joint limits, blend from the measured start pose (clamped to the limits)
   over the soft-start time, and bound the change per control step.

Every command sent lies inside ``[lower, upper]``, whatever the measured pose.

Shapes: ``A`` = number of joints, every array is ``[A]`` float64.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.errors import InputError, check_finite

ESTOP_MODES = ("hold", "damp")


MAX_STALE_TIMEOUT_S = 10.0
"""Longest accepted stale-state timeout: beyond it the watchdog would be off in all but name."""
MAX_SOFT_START_S = 60.0


@dataclass(frozen=True)
class SafetyConfig:
    """Limits and timings from ``hardware/<robot>/robot.yaml`` (``joints`` and ``safety``).

    Validated here whatever built it (robot.yaml, or ROS parameters from a file not made by us):
    every value finite, ``lower < upper``, ``max_step_change > 0``, ``0 < stale_state_timeout <= 10`` s,
    ``0 <= soft_start_s <= 60`` s; otherwise an :class:`~robot_rl.errors.InputError` naming the key
    and ``source``.
    """

    lower: np.ndarray
    upper: np.ndarray
    max_step_change: np.ndarray
    stale_state_timeout: float
    soft_start_s: float
    estop_mode: str = "hold"
    source: str = "safety configuration"

    def __post_init__(self) -> None:
        fix = "regenerate the parameters from hardware/<robot>/robot.yaml (robot-rl ros params <robot>)"
        if self.estop_mode not in ESTOP_MODES:
            raise InputError(f"must be one of {ESTOP_MODES}", file=self.source, key="estop_mode",
                             value=self.estop_mode, fix=fix)
        arrays = {}
        for key in ("lower", "upper", "max_step_change"):
            raw = getattr(self, key)
            try:
                values = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise InputError("must be a list of numbers, one per joint", file=self.source, key=key,
                                 value=raw, fix=fix) from exc
            if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
                raise InputError("must be a non-empty list of finite numbers, one per joint", file=self.source,
                                 key=key, value=values.tolist(), fix=fix)
            arrays[key] = values
        if not arrays["lower"].shape == arrays["upper"].shape == arrays["max_step_change"].shape:
            raise InputError("lower, upper and max_step_change must have one value per joint each",
                             file=self.source, key="max_step_change",
                             value={k: v.size for k, v in arrays.items()}, fix=fix)
        if not np.all(arrays["lower"] < arrays["upper"]):
            raise InputError(f"joint limits need lower < upper (upper = {arrays['upper'].tolist()})",
                             file=self.source, key="lower", value=arrays["lower"].tolist(), fix=fix)
        if not np.all(arrays["max_step_change"] > 0):
            raise InputError("must be > 0 per joint", file=self.source, key="max_step_change",
                             value=arrays["max_step_change"].tolist(), fix=fix)
        for key, value in arrays.items():
            object.__setattr__(self, key, value)
        for key, low, high, strict in (("stale_state_timeout", 0.0, MAX_STALE_TIMEOUT_S, True),
                                       ("soft_start_s", 0.0, MAX_SOFT_START_S, False)):
            value = check_finite(getattr(self, key), file=self.source, key=key, low=low, high=high,
                                 low_inclusive=not strict, fix=fix)
            object.__setattr__(self, key, value)

    @classmethod
    def from_robot(cls, robot: dict[str, Any]) -> SafetyConfig:
        """Build from a parsed ``robot.yaml`` dict."""
        joints, safety = robot["joints"], robot["safety"]
        step = safety["max_step_change"]
        if isinstance(step, int | float) and not isinstance(step, bool):
            step = [step] * len(joints)
        return cls(
            lower=np.array([j["lower"] for j in joints], dtype=np.float64),
            upper=np.array([j["upper"] for j in joints], dtype=np.float64),
            max_step_change=step,
            stale_state_timeout=safety["stale_state_timeout"],
            soft_start_s=safety["soft_start_s"],
            estop_mode=str(safety.get("estop", "hold")),
            source=robot_yaml_source(robot),
        )


def robot_yaml_source(robot: dict[str, Any]) -> str:
    """The robot.yaml a robot dict (``RobotConfig.as_dict()``) came from, for messages."""
    return str(robot.get("path") or f"hardware/{robot.get('name', '<robot>')}/robot.yaml")


@dataclass(frozen=True)
class SafetyState:
    """What the safety layer remembers between ticks (immutable; each tick returns a new one).

    Attributes:
        enabled: commands may be sent.
        estopped: the e-stop latch; cleared only by :func:`set_enabled` with ``True``.
        hold_pose: ``[A]`` the pose held while e-stopped (``hold`` mode).
        last_command: ``[A]`` the last command sent, the base of the rate limit.
        ramp_from: ``[A]`` the pose the soft start blends from.
        ramp_start: time the soft start began (``None``: begins at the next valid tick).
        stale: the last tick found the state stale.
    """

    enabled: bool = True
    estopped: bool = False
    hold_pose: np.ndarray | None = None
    last_command: np.ndarray | None = None
    ramp_from: np.ndarray | None = None
    ramp_start: float | None = None
    stale: bool = False


@dataclass(frozen=True)
class SafetyOutput:
    """One tick's result: ``command [A]`` or ``None`` (send nothing), next state, interventions."""

    command: np.ndarray | None
    state: SafetyState
    events: tuple[str, ...]


def clamp_to_limits(target: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``[A]`` target clipped into ``[lower, upper]`` per joint."""
    return np.minimum(np.maximum(target, lower), upper)


def rate_limit(target: np.ndarray, previous: np.ndarray, max_step: np.ndarray) -> np.ndarray:
    """``[A]``: move from ``previous`` towards ``target`` by at most ``max_step`` per joint."""
    return previous + np.clip(target - previous, -max_step, max_step)


def soft_start_blend(start: np.ndarray, target: np.ndarray, elapsed: float, duration: float) -> np.ndarray:
    """``[A]``: ``start + alpha * (target - start)``, ``alpha = clip(elapsed / duration, 0, 1)``."""
    alpha = 1.0 if duration <= 0 else min(max(elapsed / duration, 0.0), 1.0)
    return start + alpha * (target - start)


def is_stale(now: float, last_state_time: float | None, timeout: float) -> bool:
    """True when no state arrived yet or the latest is older than ``timeout`` seconds."""
    return last_state_time is None or now - last_state_time > timeout


def latch_estop(state: SafetyState, measured: np.ndarray | None) -> SafetyState:
    """Latch the e-stop, holding the last command (or the measured pose if none was sent)."""
    if state.estopped:
        return state
    hold = state.last_command if state.last_command is not None else measured
    return dataclasses.replace(state, estopped=True, hold_pose=None if hold is None else hold.copy())


def set_enabled(state: SafetyState, enabled: bool) -> SafetyState:
    """Enable (clears the e-stop latch; soft start again from the measured pose) or disable.

    Enabling forgets the last command: the robot may have moved while disabled or e-stopped.
    """
    if enabled:
        return dataclasses.replace(
            state, enabled=True, estopped=False, hold_pose=None, last_command=None, ramp_start=None
        )
    return dataclasses.replace(state, enabled=False, ramp_start=None)


def forget_last_command(state: SafetyState) -> SafetyState:
    """The robot was moved under the node (a simulated robot's episode reset in sim2sim): the last command is no
    base for the rate limit and no pose to hold. The next command is rate-limited from the measured pose, and until
    the policy gives one nothing is sent (the driver keeps its own). The soft start is not repeated."""
    return dataclasses.replace(state, last_command=None)


def safety_step(
    cfg: SafetyConfig,
    state: SafetyState,
    policy_target: np.ndarray | None,
    measured: np.ndarray | None,
    now: float,
    last_state_time: float | None,
) -> SafetyOutput:
    """One control tick of the safety layer (see the module docstring for the rules).

    Every command returned lies inside ``[cfg.lower, cfg.upper]``, whatever ``measured`` is: the
    measured pose a soft start or rate limit starts from is clamped first.

    Args:
        policy_target: ``[A]`` joint targets from the policy, or ``None`` if it did not run.
        measured: ``[A]`` latest valid measured joint positions, ``None`` before the first.
        now: current time (s); ``last_state_time``: arrival time of ``measured``.
    """
    if measured is None or not np.isfinite(measured).all():
        return SafetyOutput(None, state, ("no_state",))
    inside = clamp_to_limits(measured, cfg.lower, cfg.upper)
    if state.estopped:
        hold = inside if cfg.estop_mode == "damp" or state.hold_pose is None else state.hold_pose
        command = clamp_to_limits(hold, cfg.lower, cfg.upper)
        return SafetyOutput(command, dataclasses.replace(state, last_command=command), ("estop",))
    if not state.enabled:
        return SafetyOutput(None, state, ("disabled",))
    if is_stale(now, last_state_time, cfg.stale_state_timeout):
        stale_state = dataclasses.replace(state, stale=True, ramp_start=None)
        return SafetyOutput(state.last_command, stale_state, ("stale",))
    if policy_target is None or not np.isfinite(policy_target).all():
        # hold the last command; before the first one there is nothing to hold: send nothing
        event = "nan" if policy_target is not None else "no_policy"
        return SafetyOutput(state.last_command, state, (event,))
    events: list[str] = []
    base = inside if state.last_command is None else state.last_command
    if state.ramp_start is None:
        state = dataclasses.replace(state, ramp_from=base.copy(), ramp_start=now, stale=False)
    target = clamp_to_limits(policy_target, cfg.lower, cfg.upper)
    if (target != policy_target).any():
        events.append("clamped")
    elapsed = now - state.ramp_start
    if elapsed < cfg.soft_start_s:
        target = soft_start_blend(state.ramp_from, target, elapsed, cfg.soft_start_s)
        events.append("soft_start")
    command = rate_limit(target, base, cfg.max_step_change)
    if np.abs(command - target).max() > 1e-12:
        events.append("rate_limited")
    command = clamp_to_limits(command, cfg.lower, cfg.upper)  # exact: rounding never leaves the limits
    return SafetyOutput(command, dataclasses.replace(state, last_command=command), tuple(events))
