"""rosbag2 (MCAP or sqlite3) -> LeRobot v3.0 dataset, with the pure-Python ``rosbags`` reader.

Reads the robot's JointState topic and its position-command topic (Float64MultiArray in the
robot's joint order, or JointTrajectory by joint name; names and types default to
``hardware/<robot>/robot.yaml``'s ``ros`` section), aligns both on the fps grid exactly as the
recorder node does (:mod:`robot_rl.deploy.ros_frames`: latest state at ``t_k``, latest command at
``t_{k+1}``) and writes one episode per span where neither stream pauses longer than ``gap_s``
(``split="gap"``) or one per bag (``split="bag"``). Times are the bag's receive (log) timestamps.
A bag that is missing, truncated or corrupt raises :class:`BagError` naming it and the fix.
"""

from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.deploy.ros_frames import check_fps, episode_frames, intersect, ros_features, runs

JOINT_STATE = "sensor_msgs/msg/JointState"
COMMAND_TYPES = ("std_msgs/msg/Float64MultiArray", "trajectory_msgs/msg/JointTrajectory")
SIDECAR = "meta/robot_rl.json"


class BagError(ValueError):
    """A bag that cannot be converted: names the bag, what is wrong and the fix."""


@dataclass
class Streams:
    """One bag's messages in the robot's joint order (``A`` joints; times in seconds, sorted)."""

    state_t: np.ndarray  # [N]
    state: np.ndarray  # [N, A]
    velocity: np.ndarray | None  # [N, A], None when some JointState lacks velocities
    command_t: np.ndarray  # [M]
    command: np.ndarray  # [M, A]
    skipped: int  # messages dropped as invalid (wrong joints, sizes, NaN)


@dataclass
class BagSummary:
    """What a conversion produced."""

    root: Path
    episodes: int
    frames: int
    dropped_spans: int
    skipped_messages: int

    def __str__(self) -> str:
        """One line for the command line."""
        return (f"wrote {self.episodes} episodes ({self.frames} frames) to {self.root}; dropped {self.dropped_spans} "
                f"spans shorter than the minimum and {self.skipped_messages} invalid messages")


def _topic(name: str, topics: dict[str, str], kind: str, allowed: tuple[str, ...], bag: Path) -> str:
    """The bag topic matching ``name`` (with or without the leading '/')."""
    for candidate in (name, "/" + name.lstrip("/")):
        if candidate in topics:
            if topics[candidate] not in allowed:
                raise BagError(
                    f"{bag}: topic {candidate} has type {topics[candidate]}, a {kind} needs one of {allowed}"
                )
            return candidate
    raise BagError(f"{bag} has no {kind} topic {name!r}; its topics are {topics}. Pass the right one with "
                   f"--{'joint-states' if kind == 'JointState' else 'command'}-topic.")


def read_streams(bag: Path, joint_names: list[str], joint_states_topic: str, command_topic: str) -> Streams:
    """Read and reorder the JointState and command messages of one bag directory (or ``.mcap``/``.db3`` file)."""
    from rosbags.highlevel import AnyReader, AnyReaderError
    from rosbags.rosbag2 import ReaderError
    from rosbags.typesys import Stores, get_typestore

    bag = Path(bag)
    if not bag.exists():
        raise BagError(f"bag {bag} does not exist; pass a rosbag2 folder (with metadata.yaml) or its .mcap/.db3 file")
    a = len(joint_names)
    states, velocities, state_t, commands, command_t = [], [], [], [], []
    skipped = 0
    index_cache: dict[tuple[str, ...], np.ndarray | None] = {}
    try:
        with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
            topics = {c.topic: c.msgtype for c in reader.connections}
            js = _topic(joint_states_topic, topics, "JointState", (JOINT_STATE,), bag)
            cmd = _topic(command_topic, topics, "command", COMMAND_TYPES, bag)
            connections = [c for c in reader.connections if c.topic in (js, cmd)]
            for connection, stamp, raw in reader.messages(connections=connections):
                msg = reader.deserialize(raw, connection.msgtype)
                t = stamp * 1e-9
                if connection.topic == js:
                    names = tuple(msg.name)
                    if names not in index_cache:
                        lookup = {n: i for i, n in enumerate(names)}
                        index_cache[names] = (np.array([lookup[n] for n in joint_names])
                                              if all(n in lookup for n in joint_names) else None)
                    index = index_cache[names]
                    pos = np.asarray(msg.position, dtype=np.float64)
                    if index is None or len(pos) != len(names) or not np.all(np.isfinite(pos[index])):
                        skipped += 1
                        continue
                    vel = np.asarray(msg.velocity, dtype=np.float64)
                    states.append(pos[index])
                    velocities.append(vel[index] if len(vel) == len(names) else None)
                    state_t.append(t)
                else:
                    target = _command_positions(msg, connection.msgtype, joint_names)
                    if target is None or target.shape != (a,) or not np.all(np.isfinite(target)):
                        skipped += 1
                        continue
                    commands.append(target)
                    command_t.append(t)
    except (AnyReaderError, ReaderError, sqlite3.DatabaseError, struct.error, EOFError, KeyError, OSError) as exc:
        raise BagError(
            f"cannot read bag {bag} ({type(exc).__name__}: {exc}); it is truncated or corrupt. If its recorder was "
            "killed, repair it first: `ros2 bag reindex <bag>` (sqlite3) or `mcap recover in.mcap -o out.mcap`."
        ) from exc
    if not states or not commands:
        raise BagError(f"{bag}: {len(states)} valid JointState and {len(commands)} valid command messages for "
                       f"joints {joint_names}; both are needed (skipped {skipped} invalid ones)")
    has_velocity = all(v is not None for v in velocities)
    st, ct = np.asarray(state_t), np.asarray(command_t)
    so, co = np.argsort(st, kind="stable"), np.argsort(ct, kind="stable")
    return Streams(st[so], np.asarray(states)[so], np.asarray(velocities)[so] if has_velocity else None,
                   ct[co], np.asarray(commands)[co], skipped)


def _command_positions(msg: Any, msgtype: str, joint_names: list[str]) -> np.ndarray | None:
    """``[A]`` positions of a command message in ``joint_names`` order, or None when it does not fit."""
    if msgtype == COMMAND_TYPES[0]:
        return np.asarray(msg.data, dtype=np.float64)
    if not msg.points:
        return None
    by_name = dict(zip(msg.joint_names, np.asarray(msg.points[0].positions, dtype=np.float64), strict=False))
    if any(n not in by_name for n in joint_names):
        return None
    return np.array([by_name[n] for n in joint_names])


def bag_to_dataset(
    bags: list[Path],
    robot: dict[str, Any],
    out: Path,
    fps: int,
    task: str = "teleoperation",
    split: str = "gap",
    gap_s: float = 0.5,
    min_frames: int = 2,
    joint_states_topic: str | None = None,
    command_topic: str | None = None,
    overwrite: bool = False,
) -> BagSummary:
    """Convert rosbag2 recordings of ``robot`` (``RobotConfig.as_dict()``) into a new dataset at ``out``.

    Args:
        bags: bag folders (or .mcap/.db3 files); episodes never span two bags.
        fps: dataset frame rate (an integer).
        split: ``gap`` (an episode per span without a pause > ``gap_s`` in either stream) or ``bag``.
        min_frames: shorter spans are dropped (counted in the summary).
        joint_states_topic / command_topic: default to robot.yaml's ``ros`` topics.
    """
    from robot_rl.data.lerobot import LeRobotWriter
    from robot_rl.data.lerobot.meta import write_json_atomic

    fps = check_fps(fps)
    if split not in ("gap", "bag"):
        raise ValueError(f"split {split!r} must be 'gap' or 'bag'")
    if gap_s <= 0:
        raise ValueError(f"gap_s {gap_s} must be > 0 (seconds), e.g. 0.5")
    ros = robot.get("ros", {})
    joint_names = [j["name"] for j in robot["joints"]]
    js_topic = joint_states_topic or ros.get("joint_states", {}).get("topic", "/joint_states")
    cmd_topic = command_topic or ros.get("command", {}).get("topic")
    if not cmd_topic:
        raise ValueError(f"robot {robot['name']!r} has no ros.command topic in robot.yaml; pass --command-topic")
    streams = [read_streams(Path(b), joint_names, js_topic, cmd_topic) for b in bags]
    velocity = all(s.velocity is not None for s in streams)
    episodes, dropped = [], 0
    for s in streams:
        if split == "bag":
            spans = intersect([(s.state_t[0], s.state_t[-1])], [(s.command_t[0], s.command_t[-1])])
        else:
            spans = intersect(runs(s.state_t, gap_s), runs(s.command_t, gap_s))
        for span in spans:
            frames = episode_frames(span, fps, s.state_t, s.state, s.velocity if velocity else None,
                                    s.command_t, s.command)
            if len(frames["action"]) < min_frames:
                dropped += 1
                continue
            episodes.append(frames)
    if not episodes:
        raise BagError(f"no episode of at least {min_frames} frames at {fps} fps in {[str(b) for b in bags]} "
                       f"(dropped {dropped} shorter spans); raise --gap-s or lower --min-frames")
    total = 0
    with LeRobotWriter.create(out, fps=fps, features=ros_features(joint_names, velocity), robot_type=robot["name"],
                              overwrite=overwrite) as writer:
        write_json_atomic(Path(out) / SIDECAR, {"source": "rosbag2:" + ",".join(str(b) for b in bags),
                                                 "robot": robot["name"], "joint_states_topic": js_topic,
                                                 "command_topic": cmd_topic})
        for frames in episodes:
            n = len(frames["action"])
            for k in range(n):
                writer.add_frame({key: v[k] for key, v in frames.items()}, task=task)
            writer.save_episode()
            total += n
    return BagSummary(Path(out), len(episodes), total, dropped, sum(s.skipped for s in streams))
