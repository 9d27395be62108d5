"""Errors for bad input a user handed us (a file, a config value, a command-line flag).

Every loader raises :class:`InputError` (or a subclass: ``ArtifactError``, ``DatasetFormatError``,
...) naming the file, the key, the bad value and the fix. ``robot-rl`` prints the message and exits
with code 2, never a traceback; a traceback means a bug in our code, not in the user's input.

Standard library only: the ROS nodes import this on a robot computer without torch.
"""

from __future__ import annotations

import math
import sys
from typing import Any

EXIT_BAD_INPUT = 2
"""Exit code of every command and node that refuses its input."""


class InputError(ValueError):
    """Bad user input. ``str(err)`` reads ``<file>: <key> = <value>: <problem>. Fix: <fix>``.

    Args:
        problem: what is wrong, in words.
        file: the file (or the flag / config group) the value came from.
        key: dotted key inside the file (``joints.2.upper``, ``agent.learning_rate``).
        value: the offending value (shown with ``repr``).
        fix: what the user should do.
    """

    _UNSET = object()

    def __init__(self, problem: str, *, file: object = None, key: str | None = None, value: Any = _UNSET,
                 fix: str | None = None) -> None:
        self.problem, self.file, self.key, self.value, self.fix = problem, file, key, value, fix
        where = ": ".join(str(p) for p in (file, key) if p not in (None, ""))
        if value is not InputError._UNSET:
            where = f"{where} = {value!r}" if where else repr(value)
        text = f"{where}: {problem}" if where else problem
        if fix:
            text += f". Fix: {fix}"
        super().__init__(text)


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input (exit 2), including those of packages already imported.

    ``sim`` never imports ``robot_rl``, so its ``SimInputError`` and ``RobotConfigError`` are not
    :class:`InputError`; they are recognised here when their modules have been imported (they cannot
    have been raised otherwise).
    """
    types: list[type[BaseException]] = [InputError]
    sim_errors = sys.modules.get("sim.errors")
    if sim_errors is not None:
        types.append(sim_errors.SimInputError)
    robots = sys.modules.get("sim.robots.config")
    if robots is not None:
        types.append(robots.RobotConfigError)
    return tuple(types)


def check_finite(value: Any, *, file: object, key: str, low: float | None = None, high: float | None = None,
                 low_inclusive: bool = True, fix: str | None = None,
                 error: type[InputError] = InputError) -> float:
    """``value`` as a float if it is a finite number in the range, else ``error`` (an :class:`InputError`).

    ``low``/``high`` bound the range (``None`` = unbounded); ``low_inclusive=False`` demands ``value > low``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error("must be a number", file=file, key=key, value=value, fix=fix)
    number = float(value)
    if not math.isfinite(number):
        raise error("must be a finite number", file=file, key=key, value=value, fix=fix)
    if low is not None and (number < low or (number == low and not low_inclusive)):
        bound = ">=" if low_inclusive else ">"
        raise error(f"must be {bound} {low:g}", file=file, key=key, value=value, fix=fix)
    if high is not None and number > high:
        raise error(f"must be <= {high:g}", file=file, key=key, value=value, fix=fix)
    return number
