"""Errors raised by the LeRobot dataset layer."""

from __future__ import annotations


class DatasetFormatError(ValueError):
    """A dataset on disk does not follow the LeRobot v3.0 layout, or one of its files is corrupt.

    The message names the file and value at fault and, where there is one, the fix.
    """
