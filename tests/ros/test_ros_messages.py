"""Command/state message conversions of ros_nodes (real message classes, no DDS)."""

from __future__ import annotations

import numpy as np
import pytest
from ros_nodes.messages import FLOAT_ARRAY, TRAJECTORY, command_positions, imu_arrays, joint_state_arrays, make_command
from sensor_msgs.msg import Imu, JointState

pytestmark = pytest.mark.ros

NAMES = ["a", "b", "c"]


def test_trajectory_and_float_array_round_trip():
    traj = make_command(TRAJECTORY, NAMES, np.array([0.1, 0.2, 0.3]), period=0.02)
    assert traj.joint_names == NAMES and traj.points[0].time_from_start.nanosec == 20_000_000
    traj.joint_names = ["c", "a", "b"]  # a controller may list joints in its own order
    traj.points[0].positions = [0.3, 0.1, 0.2]
    np.testing.assert_allclose(command_positions(traj, NAMES), [0.1, 0.2, 0.3])
    arr = make_command(FLOAT_ARRAY, NAMES, np.array([1.0, 2.0, 3.0]), period=0.02)
    np.testing.assert_allclose(command_positions(arr, NAMES), [1, 2, 3])
    arr.data = [1.0]
    with pytest.raises(ValueError, match="1 values for 3 joints"):
        command_positions(arr, NAMES)


def test_joint_state_and_imu_conversions():
    msg = JointState(name=["c", "a", "b"], position=[3.0, 1.0, 2.0], velocity=[30.0, 10.0, 20.0])
    pos, vel = joint_state_arrays(msg, np.array([1, 2, 0]))
    np.testing.assert_allclose(pos, [1, 2, 3])
    np.testing.assert_allclose(vel, [10, 20, 30])
    with pytest.raises(ValueError, match="no velocity"):
        joint_state_arrays(JointState(name=NAMES, position=[0.0] * 3), np.arange(3))
    imu = Imu()
    imu.orientation.x, imu.orientation.y, imu.orientation.z, imu.orientation.w = 0.1, 0.2, 0.3, 0.9
    imu.angular_velocity.z = 2.0
    quat, gyro = imu_arrays(imu)
    np.testing.assert_allclose(quat, [0.9, 0.1, 0.2, 0.3])  # ROS x, y, z, w -> w, x, y, z
    np.testing.assert_allclose(gyro, [0, 0, 2.0])
