"""Range checks for config dataclasses, raising :class:`robot_rl.errors.InputError` naming the key.

Called from the ``__post_init__`` of the schemas (``OmegaConf.to_object`` runs it for every group of a
composed or reloaded config)::

    check(self, "agent", positive=("learning_rate",), unit=("gamma", "lam"), at_least_1=("num_steps_per_env",))

Every message reads ``agent.learning_rate = inf: must be a finite number. Fix: ...`` and the fix quotes
the field's default as an example value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from robot_rl.errors import InputError, check_finite


def _default(obj: Any, name: str) -> Any:
    """The dataclass default of field ``name`` (``None`` when it has none)."""
    for f in dataclasses.fields(obj):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return None


def _key(group: str, name: str) -> str:
    return f"{group}.{name}" if group else name


def _fix(obj: Any, group: str, name: str, want: str) -> str:
    """``set <key> to <want>``, with the field's default as an example."""
    key, default = _key(group, name), _default(obj, name)
    # the dataclass's default: configs/ may set another (`robot-rl train --cfg job` prints what runs)
    example = f" (e.g. {key}={default}, the schema default)" if default is not None else ""
    return f"set {key} to {want}{example}"


def fail(obj: Any, group: str, name: str, problem: str, want: str) -> InputError:
    """An :class:`InputError` for ``<group>.<name>`` of ``obj``; ``want`` describes a valid value."""
    return InputError(problem, key=_key(group, name), value=getattr(obj, name), fix=_fix(obj, group, name, want))


def _number(obj: Any, group: str, name: str, want: str) -> float:
    return check_finite(getattr(obj, name), file=None, key=_key(group, name), fix=_fix(obj, group, name, want))


def check(obj: Any, group: str, *, positive: Iterable[str] = (), non_negative: Iterable[str] = (),
          unit: Iterable[str] = (), at_least_1: Iterable[str] = (), at_least_0: Iterable[str] = (),
          choices: dict[str, Iterable[Any]] | None = None, optional: Iterable[str] = ()) -> None:
    """Validate fields of dataclass ``obj`` (config group ``group``).

    Args:
        positive: finite numbers > 0. non_negative: finite numbers >= 0. unit: finite numbers in [0, 1].
        at_least_1 / at_least_0: integers >= 1 / >= 0 (a list of integers: each element).
        choices: field -> allowed values.
        optional: fields of the above that may also be ``None``.
    """
    optional = set(optional)
    rules = [(positive, "a finite number > 0", lambda v: v > 0),
             (non_negative, "a finite number >= 0", lambda v: v >= 0),
             (unit, "a finite number in [0, 1]", lambda v: 0 <= v <= 1)]
    for names, want, ok in rules:
        for name in names:
            if name in optional and getattr(obj, name) is None:
                continue
            if not ok(_number(obj, group, name, want)):
                raise fail(obj, group, name, f"must be {want}", want)
    for names, low in ((at_least_1, 1), (at_least_0, 0)):
        for name in names:
            value = getattr(obj, name)
            if name in optional and value is None:
                continue
            items = value if isinstance(value, list | tuple) else [value]
            want = f"an integer >= {low}" + (" for every entry" if isinstance(value, list | tuple) else "")
            for v in items:
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise fail(obj, group, name, f"must be {want}", want)
    for name, allowed in (choices or {}).items():
        allowed = tuple(allowed)
        if getattr(obj, name) not in allowed:
            raise fail(obj, group, name, f"must be one of {list(allowed)}", f"one of {list(allowed)}")


def non_finite_fields(obj: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(key, value)`` of every float (also inside lists and dicts) of dataclass ``obj`` that is NaN or inf."""
    found: list[tuple[str, Any]] = []

    def walk(value: Any, key: str) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            found.append((key, value))

    walk(obj, prefix)
    return found
