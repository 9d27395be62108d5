"""The ROS tests import the ament_python module ``ros_nodes`` from its source directory.

``ros_nodes/ros_nodes`` sits inside a directory of the same name, which would otherwise be
imported as an empty namespace package from the repository root.
"""

from __future__ import annotations

import sys

from robot_rl.deploy.ros_env import ros_nodes_path

if str(ros_nodes_path()) not in sys.path:
    sys.path.insert(0, str(ros_nodes_path()))
