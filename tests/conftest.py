"""Shared pytest setup: robot assets and offscreen rendering for every test.

``ROBOT_RL_ASSETS`` defaults to ``../shared/robots`` beside the repository (as in CI), and
``MUJOCO_GL`` to ``osmesa`` (Debian's libosmesa6) so rendering works without a display or GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_SHARED_ROBOTS = Path(__file__).resolve().parents[2] / "shared" / "robots"
if "ROBOT_RL_ASSETS" not in os.environ and _SHARED_ROBOTS.is_dir():
    os.environ["ROBOT_RL_ASSETS"] = str(_SHARED_ROBOTS)
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")


@pytest.fixture
def one_thread():
    """One torch intra-op thread for the test (tiny networks on a shared 2-core machine: faster and fairer).

    Use it module-wide with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
