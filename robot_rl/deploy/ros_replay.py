"""Replay of a recorded episode on a robot, through the policy node's safety layer (numpy only).

:class:`ReplayPlayer` is the replay node's logic without ROS: every control tick it is given the
latest measured joint positions and returns the command to publish (or ``None``), having passed
the recorded target through :func:`robot_rl.deploy.safety.safety_step` (limits, soft start from
the measured pose, max step per tick, stale-state hold, e-stop). Phases:

1. ``approach``: the target is the episode's first command; the soft start blends there from the
   measured pose and the rate limit bounds each step; play starts one tick after the first command
   went out unchanged. Nothing is sent before the first JointState.
2. ``play``: one recorded command per tick at the dataset rate. Playback pauses (the index does not
   advance) while no fresh command goes out (stale state, e-stop, disabled) and while a soft start
   is blending again after one of those.
3. ``done``: the last command is held.

Tracking error (``A`` joints, radians), from the ticks of the play phase:

- ``command``: measured position one tick after a command was sent minus that command (how
  closely the robot follows the replayed commands; includes one control period of lag);
- ``recorded``: measured position when command ``k`` is sent minus the recorded
  ``observation.state[k]`` (how closely the replay reproduces the recorded motion).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.deploy.ros_frames import ACTION, STATE, action_joint_names
from robot_rl.deploy.safety import SafetyConfig, SafetyState, latch_estop, safety_step, set_enabled

PAUSING = frozenset({"no_state", "estop", "disabled", "stale", "nan", "no_policy"})


def load_episode(ds: Any, episode: int, joint_names: list[str]) -> tuple[np.ndarray, np.ndarray | None, int]:
    """``(actions [T, A], recorded states [T, A] or None, fps)`` of ``episode``, columns in ``joint_names`` order.

    Args:
        ds: the opened dataset, a :class:`robot_rl.data.lerobot.LeRobotDataset` (the caller opens it:
            deploy does not import the data package).

    Raises:
        ValueError: the dataset's joints are not the robot's (names both lists) or the episode is out of range.
    """
    root = ds.root
    if not 0 <= episode < ds.num_episodes:
        raise ValueError(f"episode {episode} is out of range: {root} has episodes 0..{ds.num_episodes - 1}")
    if ACTION not in ds.features:
        raise ValueError(f"{root} has no 'action' feature to replay; its features are {sorted(ds.features)}")
    names = action_joint_names(ds.features[ACTION].names)
    if sorted(names) != sorted(joint_names):
        raise ValueError(
            f"the dataset's joints {names} are not the robot's {joint_names}; replay it on the robot it was "
            "recorded on (or pass the matching --robot)."
        )
    order = np.array([names.index(j) for j in joint_names])
    data = ds.episode(episode)
    actions = np.asarray(data[ACTION], dtype=np.float64)[:, order]
    states = None
    state_feature = ds.features.get(STATE)
    if state_feature is not None and state_feature.names and sorted(state_feature.names) == sorted(
        f"{j}.pos" for j in joint_names
    ):
        state_order = np.array([state_feature.names.index(f"{j}.pos") for j in joint_names])
        states = np.asarray(data[STATE], dtype=np.float64)[:, state_order]
    return actions, states, ds.fps


@dataclass
class TrackingReport:
    """Per-joint tracking error of one replay (``[A]`` arrays in radians) and the safety interventions."""

    joint_names: list[str]
    frames: int
    played: int
    command_rms: np.ndarray
    command_max: np.ndarray
    recorded_rms: np.ndarray | None
    recorded_max: np.ndarray | None
    events: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (lists of floats)."""
        out = dataclasses.asdict(self)
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in out.items()}

    def table(self) -> str:
        """A per-joint table for the log / command line."""
        lines = [f"replayed {self.played}/{self.frames} frames; safety events {self.events}",
                 f"{'joint':<16}{'cmd rms':>10}{'cmd max':>10}{'rec rms':>10}{'rec max':>10}  (rad)"]
        for i, name in enumerate(self.joint_names):
            rec = ("", "") if self.recorded_rms is None else (
                f"{self.recorded_rms[i]:.4f}", f"{self.recorded_max[i]:.4f}")
            lines.append(f"{name:<16}{self.command_rms[i]:>10.4f}{self.command_max[i]:>10.4f}{rec[0]:>10}{rec[1]:>10}")
        return "\n".join(lines)


class ReplayPlayer:
    """Plays ``actions [T, A]`` through the safety layer (see the module docstring)."""

    def __init__(self, actions: np.ndarray, recorded: np.ndarray | None, cfg: SafetyConfig,
                 joint_names: list[str]) -> None:
        if actions.ndim != 2 or len(actions) == 0 or actions.shape[1] != len(joint_names):
            raise ValueError(f"actions {actions.shape} must be [T > 0, {len(joint_names)}]")
        if not np.all(np.isfinite(actions)):
            raise ValueError("the episode's actions contain NaN/Inf; refusing to replay it")
        self.actions, self.recorded, self.cfg, self.joint_names = actions, recorded, cfg, joint_names
        self.safety = SafetyState()
        self.phase = "approach"
        self.index = 0
        self.events: Counter[str] = Counter()
        self._at_first = False
        self._sent: tuple[int, np.ndarray] | None = None  # (frame, command) sent at the last play tick
        self._command_err: list[np.ndarray] = []
        self._recorded_err: list[np.ndarray] = []

    def estop(self, measured: np.ndarray | None) -> None:
        """Latch the e-stop (playback pauses until :meth:`enable`)."""
        self.safety = latch_estop(self.safety, measured)

    def enable(self, enabled: bool) -> None:
        """Enable (clears the e-stop, soft start from the measured pose) or disable sending."""
        self.safety = set_enabled(self.safety, enabled)

    def tick(self, now: float, measured: np.ndarray | None, state_time: float | None) -> np.ndarray | None:
        """One control tick: ``[A]`` command to publish, or None (send nothing)."""
        target = self.actions[min(self.index, len(self.actions) - 1)]
        out = safety_step(self.cfg, self.safety, target, measured, now, state_time)
        self.safety = out.state
        self.events.update(out.events)
        live = out.command is not None and not PAUSING.intersection(out.events)
        if self._sent is not None and measured is not None and live:
            self._command_err.append(measured - self._sent[1])
        self._sent = None
        if not live or "soft_start" in out.events or self.phase == "done":
            return out.command
        if self.phase == "approach":
            # play once the first command went out unchanged on the previous tick too: the robot
            # had one period to get there, so frame 0 starts from the recorded first pose
            arrived, self._at_first = self._at_first, "rate_limited" not in out.events
            if not (arrived and self._at_first):
                return out.command
            self.phase = "play"
        if self.recorded is not None:
            self._recorded_err.append(measured - self.recorded[self.index])
        self._sent = (self.index, out.command)
        self.index += 1
        if self.index == len(self.actions):
            self.phase = "done"
        return out.command

    def report(self) -> TrackingReport:
        """The tracking error so far (zeros before any frame was played)."""
        a = len(self.joint_names)

        def stats(errors: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            if not errors:
                return np.zeros(a), np.zeros(a)
            e = np.abs(np.asarray(errors))
            return np.sqrt((e**2).mean(axis=0)), e.max(axis=0)

        cmd_rms, cmd_max = stats(self._command_err)
        rec_rms, rec_max = stats(self._recorded_err) if self.recorded is not None else (None, None)
        return TrackingReport(self.joint_names, len(self.actions), self.index, cmd_rms, cmd_max, rec_rms, rec_max,
                              dict(self.events))
