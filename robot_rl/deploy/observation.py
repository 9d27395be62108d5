"""Rebuild the policy observation from a robot's published state (numpy only).

The same terms as the simulator's ``"policy"`` group (``sim/tasks/terms.py``), from what a
real robot publishes: JointState (reordered by name), the IMU quaternion and gyro, a velocity
command, a target and an object (cube) pose from perception, and the controller's own gait clock.
``observed = raw * scale`` per term, in the artifact's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.deploy.artifact import ArtifactError, PolicyMeta

GAIT_PERIOD_S = 0.8
"""Period (s) of the ``gait_phase`` clock; twin of ``sim.tasks.terms.GAIT_PERIOD_S`` (tests/test_gait.py pins them)."""


@dataclass
class RobotState:
    """The latest state, in the artifact's joint order (``A`` joints).

    Attributes:
        joint_pos: ``[A]`` measured joint positions (rad).
        joint_vel: ``[A]`` measured joint velocities (rad/s).
        imu_quat_wxyz: ``[4]`` IMU orientation in the world (w, x, y, z), humanoids only.
        imu_gyro: ``[3]`` IMU angular velocity in the IMU frame (rad/s).
        velocity_command: ``[3]`` (vx, vy, yaw rate).
        target_pos: ``[3]`` target position in the robot base frame (m).
        cube_pos: ``[3]`` manipulated object (cube) position in the robot base frame (m).
        gait_time_s: seconds of control since the controller started or the episode was reset (the
            ``gait_phase`` clock): the number of policy steps taken times the control period.
    """

    joint_pos: np.ndarray
    joint_vel: np.ndarray
    imu_quat_wxyz: np.ndarray | None = None
    imu_gyro: np.ndarray | None = None
    velocity_command: np.ndarray | None = None
    target_pos: np.ndarray | None = None
    cube_pos: np.ndarray | None = None
    gait_time_s: float = 0.0


def reorder_index(message_names: list[str], joint_names: list[str]) -> np.ndarray:
    """``[A]`` indices such that ``message_values[idx]`` is in ``joint_names`` order.

    Raises:
        ArtifactError: naming the joints the message lacks.
    """
    position = {name: i for i, name in enumerate(message_names)}
    missing = [n for n in joint_names if n not in position]
    if missing:
        raise ArtifactError(
            f"JointState lacks joints {missing} of the policy (it has {message_names}); check the "
            f"driver's joint names against hardware/<robot>/robot.yaml."
        )
    return np.array([position[n] for n in joint_names], dtype=np.int64)


def quat_rotate_inverse(quat_wxyz: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``[3]``: ``v`` (world frame) expressed in the frame of the unit quaternion ``[4]`` (w, x, y, z)."""
    w, xyz = quat_wxyz[0], quat_wxyz[1:]
    return v * (2.0 * w * w - 1.0) - np.cross(xyz, v) * (2.0 * w) + xyz * (2.0 * np.dot(xyz, v))


def projected_gravity(quat_wxyz: np.ndarray) -> np.ndarray:
    """``[3]`` unit gravity direction (0, 0, -1) seen in the IMU frame."""
    q = np.asarray(quat_wxyz, dtype=np.float64)
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or norm < 1e-6:
        raise ValueError(f"IMU quaternion {q} is not a rotation; check the Imu message's orientation.")
    return quat_rotate_inverse(q / norm, np.array([0.0, 0.0, -1.0]))


def gait_phase(time_s: float, period: float = GAIT_PERIOD_S) -> np.ndarray:
    """``[2]`` (sin, cos) of ``2 pi (time_s mod period) / period``: the simulator's ``gait_phase`` term."""
    angle = 2.0 * np.pi * (time_s % period) / period
    return np.array([np.sin(angle), np.cos(angle)])


def _require(value: np.ndarray | None, term: str, source: str) -> np.ndarray:
    if value is None:
        raise ValueError(f"observation term {term!r} needs {source}, which has not been received.")
    return np.asarray(value, dtype=np.float64)


def term_values(term: str, meta: PolicyMeta, state: RobotState, last_action: np.ndarray) -> np.ndarray:
    """Raw (unscaled) values of one observation term, ``[size]``."""
    if term == "joint_pos":
        return state.joint_pos - np.asarray(meta.default_joint_pos)
    if term == "joint_vel":
        return state.joint_vel
    if term == "last_action":
        return last_action
    if term == "base_ang_vel":
        return _require(state.imu_gyro, term, "an Imu message (angular_velocity)")
    if term == "projected_gravity":
        return projected_gravity(_require(state.imu_quat_wxyz, term, "an Imu message (orientation)"))
    if term == "velocity_command":
        return _require(state.velocity_command, term, "a velocity command (Twist)")
    if term == "target_pos":
        return _require(state.target_pos, term, "a target (PoseStamped in the base frame)")
    if term == "gait_phase":
        return gait_phase(state.gait_time_s)
    if term == "cube_pos":
        return _require(state.cube_pos, term, "an object pose (PoseStamped in the base frame)")
    raise ArtifactError(f"unknown observation term {term!r}")


def build_observation(meta: PolicyMeta, state: RobotState, last_action: np.ndarray) -> np.ndarray:
    """``[D]`` float32 policy observation, every term ``raw * scale`` in the artifact's order.

    Args:
        last_action: ``[A]`` the previous raw action in ``[clip_low, clip_high]`` (zeros at start).
    """
    return ObservationBuilder(meta).build(state, last_action).copy()


class ObservationBuilder:
    """:func:`build_observation` into one preallocated ``[D]`` float32 buffer (a control loop's hot path).

    Term slices, scales and the default pose are resolved once; :meth:`build` writes each term with
    ``np.multiply(..., out=...)`` and returns the same buffer every call (copy it to keep it).
    """

    def __init__(self, meta: PolicyMeta) -> None:
        self.meta = meta
        self.buffer = np.zeros(meta.observation_dim, dtype=np.float32)
        self._default = np.asarray(meta.default_joint_pos, dtype=np.float64)
        self._delta = np.zeros_like(self._default)
        self._terms: list[tuple[str, np.ndarray, float]] = []
        start = 0
        for term in meta.observation:
            self._terms.append((term.name, self.buffer[start:start + term.size], float(term.scale)))
            start += term.size

    def build(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        """``[D]`` float32 observation (the internal buffer) from ``state`` and the ``[A]`` last raw action."""
        for name, view, scale in self._terms:
            if name == "joint_pos":
                values = np.subtract(state.joint_pos, self._default, out=self._delta)
            else:
                values = np.asarray(term_values(name, self.meta, state, last_action), dtype=np.float64)
            if values.size != view.size:
                raise ValueError(f"observation term {name!r} has {values.size} values, expected {view.size}.")
            np.multiply(values.reshape(-1), scale, out=view, casting="same_kind")
        return self.buffer

