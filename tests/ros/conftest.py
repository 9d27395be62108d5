"""ROS test layer setup.

* ``ros_nodes/ros_nodes`` sits inside a directory of the same name, which would otherwise be
  imported as an empty namespace package from the repository root: put its source dir first.
* Without the ``[ros]`` extra the default run (``-m 'not ros'``) does not collect this directory,
  while a run that selects ``-m ros`` fails with the install command instead of skipping.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from robot_rl.deploy.ros_env import ros_nodes_path

if str(ros_nodes_path()) not in sys.path:
    sys.path.insert(0, str(ros_nodes_path()))

HAVE_RCLPY = importlib.util.find_spec("rclpy") is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Ignore this directory when rclpy is missing and the ros layer is not selected."""
    if HAVE_RCLPY:
        return None
    expr = config.getoption("markexpr") or ""
    if "ros" in expr.replace("not ros", ""):
        raise pytest.UsageError('the ros test layer needs rclpy: pip install -e ".[ros,dev]"')
    return True
