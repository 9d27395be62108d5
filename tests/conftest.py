"""Shared pytest setup: robot assets and offscreen rendering for every test.

``ROBOT_RL_ASSETS`` defaults to ``../shared/robots`` beside the repository (as in CI), and
``MUJOCO_GL`` to ``osmesa`` (Debian's libosmesa6) so rendering works without a display or GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

_SHARED_ROBOTS = Path(__file__).resolve().parents[2] / "shared" / "robots"
if "ROBOT_RL_ASSETS" not in os.environ and _SHARED_ROBOTS.is_dir():
    os.environ["ROBOT_RL_ASSETS"] = str(_SHARED_ROBOTS)
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
