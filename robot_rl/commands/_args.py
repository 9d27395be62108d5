"""Argument types shared by the ``robot-rl`` commands: a bad flag is refused by argparse (exit 2).

Each is an ``argparse`` ``type=``: it returns the parsed value or raises ``ArgumentTypeError``,
which argparse prints as ``robot-rl <cmd>: error: argument --flag: <why>`` with the usage line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from robot_rl.errors import InputError, check_finite

SEED_MAX = 2**32 - 1
"""Largest seed every generator we feed accepts (numpy's legacy RandomState, gymnasium)."""


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An integer in ``[minimum, maximum]`` (``None`` = unbounded)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


positive = integer(minimum=1)
"""An integer >= 1 (episodes, envs, steps)."""
count = integer(minimum=0)
"""An integer >= 0 (0 often means "skip" or "until stopped")."""
seed = integer(minimum=0, maximum=SEED_MAX)
"""A seed in ``[0, 2**32 - 1]``."""


def number(low: float | None = None, high: float | None = None, low_inclusive: bool = True) -> Callable[[str], float]:
    """A finite float in the range (``low_inclusive=False``: strictly above ``low``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        try:
            return check_finite(value, file=None, key="", low=low, high=high, low_inclusive=low_inclusive)
        except InputError as exc:
            raise argparse.ArgumentTypeError(f"{exc.problem}, got {text}") from None

    return parse


def image_size(text: str) -> tuple[int, int]:
    """``HEIGHTxWIDTH`` with even sizes from 16 to 1024 (H.264 needs even sizes)."""
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HEIGHTxWIDTH, e.g. 64x64") from None
    if not (16 <= height <= 1024 and 16 <= width <= 1024) or height % 2 or width % 2:
        raise argparse.ArgumentTypeError(f"{text}: both sizes must be even and in [16, 1024], e.g. 64x64")
    return height, width


rate = number(low=0.0, low_inclusive=False)
"""A finite number > 0 (learning rates, durations)."""
duration = number(low=0.0)
"""A finite number >= 0 (seconds, where 0 means "off")."""


def domain_id(text: str) -> int:
    """A ROS_DOMAIN_ID ROS 2 can use on Linux with the default ports (0..101, 215..232)."""
    from robot_rl.deploy.ros_env import check_domain_id
    from robot_rl.errors import InputError

    value = integer()(text)
    try:
        return check_domain_id(value)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def command_parser(name: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """The parser of ``robot-rl <name>``: its description, and an epilog of examples kept as written."""
    return argparse.ArgumentParser(prog=f"robot-rl {name}", description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_episode_args(parser: argparse.ArgumentParser, episodes: int, envs_cap: int, what: str) -> None:
    """``--episodes``, ``--num-envs`` (default ``min(episodes, envs_cap)``) and ``--seed`` of an evaluation."""
    parser.add_argument("--episodes", type=positive, default=episodes, help=f"{what} (default {episodes})")
    parser.add_argument("--num-envs", type=positive, default=None,
                        help=f"parallel envs (default min(episodes, {envs_cap}))")
    parser.add_argument("--seed", type=seed, default=12345, help="evaluation seed (default 12345)")
