"""Errors for bad input handed to the simulator (an unknown task, a bad override, a bad seed).

``sim`` never imports ``robot_rl``; ``robot_rl.errors.user_error_types`` recognises
:class:`SimInputError` so that ``robot-rl`` exits 2 with the message instead of a traceback.
"""

from __future__ import annotations


class SimInputError(ValueError):
    """A value the user chose that the simulator cannot run with; the message names it and the fix."""


class GLUnavailableError(SimInputError, RuntimeError):
    """Rendering was asked for on a machine with no usable OpenGL; the message names the packages to install.

    A ``RuntimeError`` for callers that catch that; a :class:`SimInputError` so that ``robot-rl`` prints the
    message and exits 2 (``--video``, ``--camera``) instead of a traceback.
    """


class UnknownTaskError(SimInputError, KeyError):
    """No task is registered under this name (a ``KeyError`` too, for callers that catch that)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
