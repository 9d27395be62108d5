"""Errors raised by the LeRobot dataset layer."""

from __future__ import annotations

from robot_rl.errors import InputError


class DatasetFormatError(InputError):
    """A dataset on disk does not follow the LeRobot v3.0 layout, or one of its files is corrupt.

    The message names the file and value at fault and, where there is one, the fix. An
    :class:`~robot_rl.errors.InputError` (so a ``ValueError``): ``robot-rl`` exits 2 on it.
    """
