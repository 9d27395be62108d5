"""Demo replay: a recorded episode's commands to the robot at the recorded rate, through the safety layer.

Loads episode ``episode`` of the LeRobot dataset ``dataset`` (its ``action`` must be joint positions
named ``<joint>.pos`` for exactly the robot's joints, any order), then every 1/fps s passes the next
recorded command through :class:`robot_rl.deploy.ros_replay.ReplayPlayer` — the policy node's safety
layer (:mod:`robot_rl.deploy.safety`): nothing before the first valid JointState, a soft start from
the measured pose to the first recorded command, joint limits, max step per tick, stale-state hold,
latched e-stop — and publishes Float64MultiArray or JointTrajectory as the robot expects.

Topics (relative): ``estop`` (std_msgs/Bool, True latches). Service ``~/enable`` (std_srvs/SetBool).
At the end it logs the per-joint tracking error, writes it to ``report_file`` (JSON) when set, holds
the last command for ``hold_s`` and exits when ``exit_when_done`` (status 0; 1 when stopped before the end).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool
from std_srvs.srv import SetBool

from robot_rl.data.lerobot import DatasetFormatError, LeRobotDataset
from robot_rl.deploy.artifact import ArtifactError
from robot_rl.deploy.observation import reorder_index
from robot_rl.deploy.ros_replay import ReplayPlayer, load_episode
from robot_rl.deploy.safety import SafetyConfig
from ros_nodes import spin
from ros_nodes.messages import command_class, make_command
from ros_nodes.params import declare

PARAMS = {
    "robot": (str, None),
    "joint_names": ("str[]", None),
    "lower": ("float[]", None),
    "upper": ("float[]", None),
    "max_step_change": ("float[]", None),
    "stale_state_timeout": (float, None),
    "soft_start_s": (float, None),
    "estop_mode": (str, "hold"),
    "joint_states_topic": (str, "joint_states"),
    "command_topic": (str, None),
    "command_type": (str, None),
    "dataset": (str, None),
    "episode": (int, 0),
    "report_file": (str, ""),
    "hold_s": (float, 0.5),
    "exit_when_done": (bool, True),
}


class ReplayNode(Node):
    """Publishes one recorded episode through the safety layer; raises ValueError if misconfigured."""

    def __init__(self, stop: threading.Event, node_name: str = "demo_replay") -> None:
        super().__init__(node_name)
        p = declare(self, PARAMS)
        self.p, self.stop = p, stop
        self.joint_names: list[str] = p["joint_names"]
        a = len(self.joint_names)
        actions, recorded, fps = load_episode(LeRobotDataset(p["dataset"]), p["episode"], self.joint_names)
        cfg = SafetyConfig(
            lower=np.asarray(p["lower"]), upper=np.asarray(p["upper"]),
            max_step_change=np.broadcast_to(np.asarray(p["max_step_change"]), (a,)).copy(),
            stale_state_timeout=p["stale_state_timeout"], soft_start_s=p["soft_start_s"], estop_mode=p["estop_mode"],
        )
        self.player = ReplayPlayer(actions, recorded, cfg, self.joint_names)
        self.period = 1.0 / fps
        self.measured: np.ndarray | None = None
        self.state_time: float | None = None
        self.done_at: float | None = None
        self._index_cache: tuple[tuple[str, ...], np.ndarray] | None = None
        self._bad_state_logged = False
        self.pub = self.create_publisher(command_class(p["command_type"]), p["command_topic"], 10)
        self.create_subscription(JointState, p["joint_states_topic"], self._on_joint_state, qos_profile_sensor_data)
        self.create_subscription(Bool, "estop", self._on_estop, 10)
        self.create_service(SetBool, "~/enable", self._on_enable)
        self.create_timer(self.period, self._on_tick)
        self.get_logger().info(
            f"replaying episode {p['episode']} of {p['dataset']} ({len(actions)} frames at {fps} fps) on "
            f"{p['robot']}: commands on {self.pub.topic_name}; waiting for the first JointState"
        )

    def _on_joint_state(self, msg: JointState) -> None:
        names = tuple(msg.name)
        try:
            if self._index_cache is None or self._index_cache[0] != names:
                self._index_cache = (names, reorder_index(list(names), self.joint_names))
            pos = np.asarray(msg.position, dtype=np.float64)[self._index_cache[1]]
            if not np.all(np.isfinite(pos)):
                raise ValueError(f"non-finite JointState position {pos}")
        except (ArtifactError, ValueError, IndexError) as exc:
            if not self._bad_state_logged:
                self.get_logger().error(f"ignoring invalid JointState (no command from it): {exc}")
                self._bad_state_logged = True
            return
        self.measured, self.state_time = pos, time.monotonic()

    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self.player.safety.estopped:
            self.player.estop(self.measured)
            self.get_logger().warning("E-STOP latched: holding; call ~/enable true to resume the replay")

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.player.enable(request.data)
        response.success = True
        response.message = "enabled (soft start)" if request.data else "disabled: sending nothing"
        return response

    def _on_tick(self) -> None:
        now = time.monotonic()
        phase = self.player.phase
        command = self.player.tick(now, self.measured, self.state_time)
        if command is not None:
            self.pub.publish(make_command(self.p["command_type"], self.joint_names, command, self.period))
        if phase == "approach" and self.player.phase == "play":
            self.get_logger().info("at the first recorded command: playing")
        if self.player.phase == "done" and self.done_at is None:
            self.done_at = now
        if self.done_at is not None and now - self.done_at >= self.p["hold_s"] and self.p["exit_when_done"]:
            self.stop.set()

    def finish(self) -> None:
        """Log the tracking report and write it to ``report_file``."""
        report = self.player.report()
        self.get_logger().info("replay finished\n" + report.table())
        if self.p["report_file"]:
            with open(self.p["report_file"], "w") as f:
                json.dump(report.to_json(), f, indent=1)


def main(args: list[str] | None = None) -> int:
    """Console entry point ``replay_node``."""
    node = spin.run_node(args, "demo_replay", ReplayNode, (ValueError, DatasetFormatError, FileNotFoundError),
                         ReplayNode.finish)
    if node is None:
        return 2
    return 0 if node.player.phase == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
