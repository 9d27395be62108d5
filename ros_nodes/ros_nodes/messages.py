"""Conversions between ROS messages and the numpy arrays of :mod:`robot_rl.deploy` (``A`` joints)."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped, Twist
from sensor_msgs.msg import Image, Imu, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
COMMAND_TYPES = {FLOAT_ARRAY: Float64MultiArray, TRAJECTORY: JointTrajectory}


def command_class(type_name: str) -> type:
    """The message class of a command type name from robot.yaml."""
    if type_name not in COMMAND_TYPES:
        raise ValueError(f"command type {type_name!r} is not supported; use one of {sorted(COMMAND_TYPES)}.")
    return COMMAND_TYPES[type_name]


def make_command(type_name: str, joint_names: list[str], positions: np.ndarray, period: float):
    """A position command ``[A]``: Float64MultiArray (forward_command_controller, yaml joint order)
    or a one-point JointTrajectory reached after ``period`` s (joint_trajectory_controller)."""
    values = [float(x) for x in positions]
    if type_name == FLOAT_ARRAY:
        return Float64MultiArray(data=values)
    sec = int(period)
    point = JointTrajectoryPoint(
        positions=values, time_from_start=Duration(sec=sec, nanosec=int((period - sec) * 1e9))
    )
    return JointTrajectory(joint_names=list(joint_names), points=[point])


class CommandMessage:
    """One preallocated command message refilled every control period (the policy node's hot path).

    ``fill(positions [A])`` writes the positions into the same Float64MultiArray or one-point
    JointTrajectory (joint names and ``time_from_start`` set once) and returns it.
    """

    def __init__(self, type_name: str, joint_names: list[str], period: float) -> None:
        self.msg = make_command(type_name, joint_names, np.zeros(len(joint_names)), period)
        self._point = self.msg.points[0] if type_name == TRAJECTORY else None

    def fill(self, positions: np.ndarray):
        """The message carrying ``positions [A]`` (float64)."""
        if self._point is None:
            self.msg.data = positions
        else:
            self._point.positions = positions
        return self.msg


def command_positions(msg, joint_names: list[str]) -> np.ndarray:
    """``[A]`` positions from either command type; trajectories are reordered by joint name."""
    if isinstance(msg, Float64MultiArray):
        values = np.asarray(msg.data, dtype=np.float64)
        if values.shape != (len(joint_names),):
            raise ValueError(f"command has {values.shape[0]} values for {len(joint_names)} joints.")
        return values
    if not msg.points:
        raise ValueError("JointTrajectory command without points.")
    by_name = dict(zip(msg.joint_names, msg.points[0].positions, strict=True))
    missing = [n for n in joint_names if n not in by_name]
    if missing:
        raise ValueError(f"JointTrajectory command lacks joints {missing}.")
    return np.array([by_name[n] for n in joint_names], dtype=np.float64)


def joint_state_arrays(msg: JointState, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``([A] position, [A] velocity)`` in policy order; ``index`` from ``reorder_index``."""
    pos = np.asarray(msg.position, dtype=np.float64)[index]
    vel = np.asarray(msg.velocity, dtype=np.float64)[index] if len(msg.velocity) else None
    if vel is None:
        raise ValueError("JointState has no velocity; the policy observes joint velocities.")
    return pos, vel


def imu_arrays(msg: Imu) -> tuple[np.ndarray, np.ndarray]:
    """``([4] orientation w, x, y, z, [3] gyro)`` from an Imu message (ROS stores x, y, z, w)."""
    q, w = msg.orientation, msg.angular_velocity
    return np.array([q.w, q.x, q.y, q.z]), np.array([w.x, w.y, w.z])


def twist_command(msg: Twist) -> np.ndarray:
    """``[3]`` (vx, vy, yaw rate)."""
    return np.array([msg.linear.x, msg.linear.y, msg.angular.z])


def pose_position(msg: PoseStamped) -> np.ndarray:
    """``[3]`` position of a PoseStamped."""
    p = msg.pose.position
    return np.array([p.x, p.y, p.z])


IMAGE_ENCODING = "rgb8"
"""The one ``sensor_msgs/Image`` encoding a VLA policy takes (its artifact's ``vla.image_format``)."""


def image_array(msg: Image) -> np.ndarray:
    """uint8 ``[3, H, W]`` (RGB, channels first) of an ``rgb8`` Image (rows may be padded: ``step >= 3 W``).

    Raises:
        ValueError: another encoding, or fewer bytes than ``height * step``.
    """
    if msg.encoding != IMAGE_ENCODING:
        raise ValueError(f"image encoding {msg.encoding!r}: the policy takes {IMAGE_ENCODING}")
    h, w, step = msg.height, msg.width, msg.step
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if h < 1 or w < 1 or step < 3 * w or data.size < h * step:
        raise ValueError(f"image {h}x{w} with step {step} holds {data.size} bytes; rgb8 needs step >= {3 * w} and "
                         f"height * step bytes")
    return data[: h * step].reshape(h, step)[:, : 3 * w].reshape(h, w, 3).transpose(2, 0, 1)


def image_message(image: np.ndarray, msg: Image | None = None) -> Image:
    """An ``rgb8`` Image of uint8 ``image [3, H, W]`` (``msg`` refilled when given; the caller stamps it)."""
    msg = Image() if msg is None else msg
    msg.height, msg.width = int(image.shape[1]), int(image.shape[2])
    msg.encoding, msg.is_bigendian, msg.step = IMAGE_ENCODING, 0, 3 * msg.width
    msg.data = np.ascontiguousarray(image.transpose(1, 2, 0)).tobytes()
    return msg
