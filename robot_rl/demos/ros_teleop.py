"""Keyboard teleoperation of a ROS 2 robot (joint mode), through the policy node's safety layer.

:class:`RosTeleop` is an rclpy node living in the calling process (it needs the terminal for the
keys): it subscribes the robot's JointState, starts the key targets (:class:`KeyTeleop`) from the
first measured pose, and every control period publishes the target passed through
:func:`robot_rl.deploy.safety.safety_step` (limits, soft start, max step, stale-state hold) on the
robot's command topic. ``space`` asks the recorder node to close the episode and start the next
(``/demo_recorder/stop`` then ``start``). The recorder node records it like any other command source.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from robot_rl.demos.teleop import KeySource, KeyTeleop
from robot_rl.deploy.safety import SafetyConfig, SafetyState, safety_step

FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"


class RosTeleop:
    """Key-driven position commands for ``robot`` (``RobotConfig.as_dict()``) on ROS domain ``domain_id``.

    Args:
        recorder: node name of the recorder whose services ``space`` calls ("" for none).
        joint_step: rad per key press.
    """

    def __init__(self, robot: dict[str, Any], keys: KeySource, domain_id: int, namespace: str = "",
                 recorder: str = "demo_recorder", joint_step: float = 0.02) -> None:
        import rclpy
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        self.keys, self.joint_step = keys, joint_step
        self.names = [j["name"] for j in robot["joints"]]
        self.cfg = SafetyConfig.from_robot(robot)
        self.safety = SafetyState()
        self.period = 1.0 / float(robot["control"]["policy_hz"])
        ros = robot.get("ros", {})
        self.command_type = ros["command"]["type"]
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("keyboard_teleop", namespace=namespace or None, context=self.context)
        self.msg_class = Float64MultiArray if self.command_type == FLOAT_ARRAY else JointTrajectory
        self.pub = self.node.create_publisher(self.msg_class, ros["command"]["topic"].lstrip("/"), 10)
        js_topic = ros.get("joint_states", {}).get("topic", "joint_states").lstrip("/")
        self.node.create_subscription(JointState, js_topic, self._on_state, qos_profile_sensor_data)
        self.trigger = Trigger
        self.services = {name: self.node.create_client(Trigger, f"{recorder}/{name}")
                         for name in ("stop", "start")} if recorder else {}
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.measured: np.ndarray | None = None
        self.state_time: float | None = None
        self.teleop: KeyTeleop | None = None
        self.sent = 0

    def _on_state(self, msg: Any) -> None:
        lookup = {n: i for i, n in enumerate(msg.name)}
        if any(n not in lookup for n in self.names):
            return
        pos = np.array([msg.position[lookup[n]] for n in self.names], dtype=np.float64)
        if np.all(np.isfinite(pos)):
            self.measured, self.state_time = pos, time.monotonic()

    def _message(self, command: np.ndarray):
        from builtin_interfaces.msg import Duration
        from trajectory_msgs.msg import JointTrajectoryPoint

        values = [float(x) for x in command]
        if self.command_type == FLOAT_ARRAY:
            return self.msg_class(data=values)
        point = JointTrajectoryPoint(positions=values, time_from_start=Duration(nanosec=int(self.period * 1e9)))
        return self.msg_class(joint_names=self.names, points=[point])

    def _new_episode(self) -> None:
        """Recorder ``~/stop`` (saves), then ``~/start`` once the stop was answered (services run in any order)."""
        if not self.services or not all(c.service_is_ready() for c in self.services.values()):
            self.node.get_logger().warning("no recorder services: space ignored")
            return
        future = self.services["stop"].call_async(self.trigger.Request())
        self.executor.spin_until_future_complete(future, timeout_sec=2.0)
        self.services["start"].call_async(self.trigger.Request())

    def step(self) -> np.ndarray | None:
        """One control period: spin callbacks, read keys, publish; the command sent (None: nothing)."""
        deadline = time.monotonic() + self.period
        while (left := deadline - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=left)
        keys = self.keys.poll()
        if "space" in keys:
            self._new_episode()
        target = None
        if self.measured is not None:
            if self.teleop is None:
                self.teleop = KeyTeleop(self.measured, self.cfg.lower, self.cfg.upper, "joint",
                                        joint_step=self.joint_step)
            target = self.teleop.apply([k for k in keys if k != "space"])
        out = safety_step(self.cfg, self.safety, target, self.measured, time.monotonic(), self.state_time)
        self.safety = out.state
        if out.command is not None:
            self.pub.publish(self._message(out.command))
            self.sent += 1
        return out.command

    def close(self) -> None:
        """Destroy the node and its context."""
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
