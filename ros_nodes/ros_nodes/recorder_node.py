"""Demo recorder: the robot's JointState and position commands, sampled at the dataset fps, into a
LeRobot v3.0 dataset (``observation.state``, ``observation.velocity``, ``action``; see
:mod:`robot_rl.deploy.ros_frames` for the alignment).

Episodes: with ``auto_start`` (default) an episode starts as soon as both a JointState and a command
are fresh, and ends after ``episode_s`` seconds (0: never), when either stream stops for longer than
``max_gap_s``, or on the ``~/stop`` service; the next one then starts by itself. Services (all
std_srvs/Trigger): ``~/start`` arms recording, ``~/stop`` saves the current episode and disarms,
``~/discard`` drops the current episode and disarms. Each saved episode is committed to disk
before the next begins, so killing the node keeps every episode saved before. SIGINT/SIGTERM save
the episode in progress. After ``max_episodes`` (0: unlimited) the node exits by itself.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from robot_rl.data.lerobot import DatasetFormatError, LeRobotWriter, meta
from robot_rl.deploy.artifact import ArtifactError
from robot_rl.deploy.observation import reorder_index
from robot_rl.deploy.ros_frames import ACTION, STATE, VELOCITY, check_fps, ros_features
from ros_nodes import spin
from ros_nodes.messages import command_class, command_positions
from ros_nodes.params import declare

PARAMS = {
    "robot": (str, None),
    "joint_names": ("str[]", None),
    "joint_states_topic": (str, "joint_states"),
    "command_topic": (str, None),
    "command_type": (str, None),
    "dataset": (str, None),  # folder to create (or extend with resume)
    "fps": (int, 30),
    "task": (str, "teleoperation"),  # the natural-language task stored with every frame
    "velocity": (bool, True),  # record observation.velocity (JointState must carry velocities)
    "overwrite": (bool, False),
    "resume": (bool, False),  # append to an existing dataset
    "auto_start": (bool, True),
    "episode_s": (float, 0.0),
    "max_gap_s": (float, 0.5),
    "max_episodes": (int, 0),
    "min_frames": (int, 2),
}
SIDECAR = "meta/robot_rl.json"


class RecorderNode(Node):
    """Samples the latest JointState and command every 1/fps s and writes episodes."""

    def __init__(self, stop: threading.Event, node_name: str = "demo_recorder") -> None:
        super().__init__(node_name)
        p = declare(self, PARAMS)
        self.p, self.stop = p, stop
        self.joint_names: list[str] = p["joint_names"]
        self.fps = check_fps(p["fps"])
        self.writer = self._open_writer()
        self.state: tuple[np.ndarray, np.ndarray | None, float] | None = None  # pos [A], vel [A], time
        self.command: tuple[np.ndarray, float] | None = None  # [A], time
        self.frames: list[dict[str, np.ndarray]] = []  # the episode in progress; the last awaits its action
        self.sample_times: list[float] = []
        self.armed = p["auto_start"]
        self.saved = 0
        self._index_cache: tuple[tuple[str, ...], np.ndarray] | None = None
        self._logged: set[str] = set()
        self.create_subscription(JointState, p["joint_states_topic"], self._on_joint_state, qos_profile_sensor_data)
        self.create_subscription(command_class(p["command_type"]), p["command_topic"], self._on_command, 10)
        self.create_service(Trigger, "~/start", self._on_start)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.create_service(Trigger, "~/discard", self._on_discard)
        self.create_timer(1.0 / self.fps, self._on_tick)
        self.get_logger().info(
            f"recording {p['robot']} to {p['dataset']} at {self.fps} fps: states {p['joint_states_topic']}, "
            f"commands {p['command_topic']} ({p['command_type']}), task {p['task']!r}, "
            f"{'auto start' if self.armed else 'waiting for ~/start'}"
        )

    def _open_writer(self) -> LeRobotWriter:
        p = self.p
        features = ros_features(self.joint_names, p["velocity"])
        root = Path(p["dataset"])
        if p["resume"] and (root / meta.INFO_PATH).is_file():
            writer = LeRobotWriter.resume(root)
            have = {k: f.names for k, f in writer.info.features.items() if k in (STATE, VELOCITY, ACTION)}
            want = {k: f["names"] for k, f in features.items()}
            if have != want or writer.info.fps != self.fps:
                raise ValueError(
                    f"cannot resume {root}: it records {have} at {writer.info.fps} fps, this node {want} at "
                    f"{self.fps} fps; record to a new dataset folder."
                )
            return writer
        writer = LeRobotWriter.create(root, fps=self.fps, features=features, robot_type=p["robot"],
                                      overwrite=p["overwrite"])
        meta.write_json_atomic(root / SIDECAR, {
            "source": f"ros:{p['joint_states_topic']}+{p['command_topic']}", "robot": p["robot"],
            "command_type": p["command_type"],
        })
        return writer

    def _log_once(self, key: str, text: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            self.get_logger().error(text)

    # ---------------------------------------------------------------- inputs
    def _on_joint_state(self, msg: JointState) -> None:
        names = tuple(msg.name)
        try:
            if self._index_cache is None or self._index_cache[0] != names:
                self._index_cache = (names, reorder_index(list(names), self.joint_names))
            index = self._index_cache[1]
            pos = np.asarray(msg.position, dtype=np.float64)[index]
            vel = None
            if self.p["velocity"]:
                if len(msg.velocity) != len(msg.name):
                    raise ValueError("JointState has no velocities; set velocity:=false to record positions only")
                vel = np.asarray(msg.velocity, dtype=np.float64)[index]
            if not np.all(np.isfinite(pos)) or (vel is not None and not np.all(np.isfinite(vel))):
                raise ValueError(f"non-finite JointState {pos} / {vel}")
        except (ArtifactError, ValueError, IndexError) as exc:
            self._log_once("state", f"ignoring invalid JointState: {exc}")
            return
        self.state = (pos, vel, time.monotonic())

    def _on_command(self, msg) -> None:
        try:
            target = command_positions(msg, self.joint_names)
            if not np.all(np.isfinite(target)):
                raise ValueError(f"non-finite command {target}")
        except ValueError as exc:
            self._log_once("command", f"ignoring invalid command: {exc}")
            return
        self.command = (target, time.monotonic())

    # ---------------------------------------------------------------- episodes
    def _on_tick(self) -> None:
        now = time.monotonic()
        gap = self.p["max_gap_s"]
        fresh = (self.state is not None and self.command is not None
                 and now - self.state[2] <= gap and now - self.command[1] <= gap)
        if not fresh:
            if self.frames:
                self.finish_episode("a stream stopped for more than max_gap_s")
            return
        if not self.armed:
            return
        if self.frames:
            self.frames[-1][ACTION] = self.command[0]
        else:
            self.get_logger().info(f"episode {self.writer.info.total_episodes} started")
        pos, vel, _ = self.state
        self.frames.append({STATE: pos} | ({VELOCITY: vel} if vel is not None else {}))
        self.sample_times.append(now)
        if self.p["episode_s"] > 0 and len(self.frames) >= round(self.p["episode_s"] * self.fps):
            self.finish_episode("episode_s reached")

    def finish_episode(self, why: str, keep: bool = True, rearm: bool | None = None) -> None:
        """Close the episode in progress and write it as one episode (or drop it).

        The last observation takes the command in force now. Frames sampled while a stream was
        already silent (between its last message and the gap detection) are dropped.
        """
        if self.frames and self.state is not None and self.command is not None:
            self.frames[-1][ACTION] = self.command[0]
            last_fresh = min(self.state[2], self.command[1]) + 1.0 / self.fps
            while self.frames and self.sample_times[len(self.frames) - 1] > last_fresh:
                self.frames.pop()
        frames, self.frames, self.sample_times = self.frames, [], []
        n = len(frames)
        if keep and n >= self.p["min_frames"]:
            for frame in frames:
                self.writer.add_frame(frame, task=self.p["task"])
            index = self.writer.save_episode()
            self.saved += 1
            self.get_logger().info(f"saved episode {index} ({n} frames, {n / self.fps:.2f} s): {why}")
        elif n:
            self.get_logger().warning(f"dropped an episode of {n} frames: {why}")
        self.armed = self.p["auto_start"] if rearm is None else rearm
        if self.p["max_episodes"] and self.saved >= self.p["max_episodes"] and not self.stop.is_set():
            self.get_logger().info(f"recorded {self.saved} episodes (max_episodes): exiting")
            self.armed = False
            self.stop.set()

    def _on_start(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = not self.frames
        response.message = "already recording an episode" if self.frames else "armed"
        self.armed = True
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        before = self.saved
        self.finish_episode("~/stop", rearm=False)
        response.success = True
        response.message = f"saved episode {self.saved - 1}" if self.saved > before else "no episode in progress"
        return response

    def _on_discard(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.finish_episode("~/discard", keep=False, rearm=False)
        response.success, response.message = True, "discarded; call ~/start to record again"
        return response

    def close(self) -> None:
        """Save the episode in progress (if long enough) and close the writer."""
        self.finish_episode("node shutdown", rearm=False)
        self.writer.close()


def main(args: list[str] | None = None) -> int:
    """Console entry point ``recorder_node``."""
    def finish(node: RecorderNode) -> None:
        node.close()
        node.get_logger().info(f"{node.saved} episodes in {node.p['dataset']}")

    node = spin.run_node(args, "demo_recorder", RecorderNode, (ValueError, FileExistsError, DatasetFormatError),
                         finish)
    return 2 if node is None else 0


if __name__ == "__main__":
    sys.exit(main())
