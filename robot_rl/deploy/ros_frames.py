"""Joint-space demo frames from ROS streams (JointState + position commands), pure numpy.

Shared by the recorder node (live) and the rosbag2 converter (offline) so both produce the same
dataset from the same messages. ``A`` = number of joints, ``N``/``M`` = messages of a stream.

Per frame (LeRobot feature names):

- ``observation.state``    float32 ``[A]`` measured joint positions (rad), names ``<joint>.pos``
- ``observation.velocity`` float32 ``[A]`` measured joint velocities (rad/s), names ``<joint>.vel``
  (only when the robot's JointState carries velocities)
- ``action``               float32 ``[A]`` the position command, names ``<joint>.pos``

Alignment on the fps grid ``t_k = start + k / fps`` (sample-and-hold, no interpolation):
``observation.*[k]`` is the latest JointState at or before ``t_k``; ``action[k]`` is the latest
command at or before ``t_{k+1}``, i.e. the command sent in answer to observation ``k`` by a
controller running at the dataset rate (LeRobot's own record loop pairs them the same way).
"""

from __future__ import annotations

from typing import Any

import numpy as np

STATE, VELOCITY, ACTION = "observation.state", "observation.velocity", "action"


def ros_features(joint_names: list[str], velocity: bool) -> dict[str, dict[str, Any]]:
    """LeRobot features of a ROS joint-space recording of ``joint_names`` (see the module docstring)."""
    a = len(joint_names)
    features = {STATE: {"dtype": "float32", "shape": [a], "names": [f"{j}.pos" for j in joint_names]}}
    if velocity:
        features[VELOCITY] = {"dtype": "float32", "shape": [a], "names": [f"{j}.vel" for j in joint_names]}
    features[ACTION] = {"dtype": "float32", "shape": [a], "names": [f"{j}.pos" for j in joint_names]}
    return features


def action_joint_names(names: list[str] | None) -> list[str]:
    """Joint names of a position ``action`` feature (``<joint>.pos``); a clear error for anything else."""
    if not names or not all(n.endswith(".pos") for n in names):
        raise ValueError(
            f"the dataset's action names {names} are not joint positions ('<joint>.pos'): only position "
            "commands can be replayed on a robot; record with `robot-rl record` or convert with "
            "`robot-rl dataset from-bag`."
        )
    return [n.removesuffix(".pos") for n in names]


def check_fps(fps: float) -> int:
    """``fps`` as the positive int LeRobot stores, or a ValueError naming it."""
    if fps <= 0 or abs(fps - round(fps)) > 1e-9:
        raise ValueError(f"fps {fps} must be a positive integer (LeRobot stores fps as an int); e.g. --fps 30")
    return round(fps)


def runs(times: np.ndarray, gap_s: float) -> list[tuple[float, float]]:
    """``[(first, last)]`` time spans of a sorted stream ``times [N]`` with no gap longer than ``gap_s``."""
    if len(times) == 0:
        return []
    breaks = np.flatnonzero(np.diff(times) > gap_s)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(times) - 1]])
    return [(float(times[s]), float(times[e])) for s, e in zip(starts, ends, strict=True)]


def intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Spans covered by both sorted, disjoint span lists ``a`` and ``b``."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def hold(times: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``[len(at), ...]`` the latest of ``values [N, ...]`` (stamped ``times [N]``, sorted) at or before each ``at``.

    Every ``at`` must be >= ``times[0]``.
    """
    idx = np.searchsorted(times, at, side="right") - 1
    if np.any(idx < 0):
        raise ValueError(f"sample time {float(at.min())} precedes the stream's first message at {float(times[0])}")
    return values[idx]


def episode_frames(
    span: tuple[float, float],
    fps: int,
    state_t: np.ndarray,
    state: np.ndarray,
    velocity: np.ndarray | None,
    command_t: np.ndarray,
    command: np.ndarray,
) -> dict[str, np.ndarray]:
    """Frames of one episode covering ``span`` (seconds) on the fps grid (see the module docstring).

    Args:
        state_t: ``[N]`` sorted JointState times; ``state``/``velocity``: ``[N, A]`` (velocity may be None).
        command_t: ``[M]`` sorted command times; ``command``: ``[M, A]``.

    Returns:
        ``{feature: [T, A] float32}`` with ``T = floor((end - start) * fps) + 1``.
    """
    start, end = span
    grid = start + np.arange(int(np.floor((end - start) * fps + 1e-9)) + 1) / fps
    frames = {STATE: hold(state_t, state, grid).astype(np.float32)}
    if velocity is not None:
        frames[VELOCITY] = hold(state_t, velocity, grid).astype(np.float32)
    frames[ACTION] = hold(command_t, command, grid + 1.0 / fps).astype(np.float32)
    return frames
