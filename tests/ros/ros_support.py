"""Support for the ROS tests: node processes started from the launch files, and an in-test probe.

Every test gets its own ROS_DOMAIN_ID so parallel runs do not cross; nodes run as real processes
(exactly the command lines the YAML launch files resolve to) and talk to the probe over DDS.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool

from robot_rl.deploy.node_procs import NodeProcesses as Nodes

__all__ = ["Nodes", "Probe", "fresh_domain_id", "max_step"]
_domains = itertools.count()


def fresh_domain_id() -> int:
    """A ROS_DOMAIN_ID unlikely to be used by another test process running now (1..100).

    Under pytest-xdist (``-n N``) each worker draws from its own slice of 1..100, so the suite's own workers never
    share a domain; another suite running beside it (its own pid) is only unlikely to.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; unset without xdist
    workers = max(1, min(100, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    size = 100 // workers
    first = 1 + size * (int(worker[2:]) % workers if worker.startswith("gw") else 0)
    return first + (os.getpid() * 13 + next(_domains)) % size


class Probe:
    """An rclpy node in the test process: plays the robot driver and records commands."""

    def __init__(self, domain_id: int, joint_names: list[str],
                 command_topic: str = "forward_position_controller/commands") -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("probe", context=self.context)
        self.joint_names = joint_names
        self.lock = threading.Lock()
        self.commands: list[tuple[float, np.ndarray]] = []
        self.state_fn = None  # callable(t) -> [A] positions, or None: publish nothing
        self.command_sub = self.node.create_subscription(Float64MultiArray, command_topic, self._on_command, 50)
        self.js_pub = self.node.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
        self.estop_pub = self.node.create_publisher(Bool, "estop", 10)
        self.enable = self.node.create_client(SetBool, "policy_node/enable")
        self.node.create_timer(0.005, self._publish_state)  # a 200 Hz driver
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_command(self, msg: Float64MultiArray) -> None:
        with self.lock:
            self.commands.append((time.monotonic(), np.asarray(msg.data)))

    def _publish_state(self) -> None:
        fn = self.state_fn
        if fn is None:
            return
        q = np.asarray(fn(time.monotonic()), dtype=np.float64)
        msg = JointState(name=self.joint_names, position=q.tolist(), velocity=[0.0] * len(q))
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.js_pub.publish(msg)

    def record(self, msg_type: type, topic: str) -> list:
        """Subscribe ``topic`` and return the list its messages are appended to."""
        messages: list = []
        self.node.create_subscription(msg_type, topic, messages.append, 50)
        return messages

    def received(self, since: float = 0.0) -> list[tuple[float, np.ndarray]]:
        """Commands received after monotonic time ``since``."""
        with self.lock:
            return [(t, c) for t, c in self.commands if t > since]

    def wait_for(self, predicate, timeout: float) -> bool:
        """Poll ``predicate()`` every 20 ms until it is true or ``timeout`` s pass."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()

    def call_enable(self, value: bool, timeout: float = 10.0) -> str:
        """Call ``policy_node/enable`` and return its message."""
        assert self.enable.wait_for_service(timeout_sec=timeout), "policy_node/enable service not found"
        future = self.enable.call_async(SetBool.Request(data=value))
        end = time.monotonic() + timeout
        while not future.done() and time.monotonic() < end:
            time.sleep(0.01)
        assert future.done(), "policy_node/enable did not answer"
        return future.result().message

    def close(self) -> None:
        """Stop spinning and shut the context down."""
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self.thread.join(timeout=5)


def max_step(commands: list[tuple[float, np.ndarray]]) -> float:
    """Largest per-joint change between consecutive commands."""
    arr = np.array([c for _, c in commands])
    return float(np.abs(np.diff(arr, axis=0)).max()) if len(arr) > 1 else 0.0


def run_sim2sim(probe: Probe, nodes: Nodes, episodes: list, count: int, timeout: float) -> None:
    """Let the policy node drive the simulated robot until it has reported ``count`` ``episodes``, then stop both
    nodes and ``probe``; asserts the policy node commanded the robot and both nodes exited 0 (their logs if not)."""
    try:
        ok = probe.wait_for(lambda: len(episodes) >= count, timeout)
        assert ok, nodes.log("sim_robot") + nodes.log("policy_node")
        assert len(probe.received()) > 50, "the policy node did not command the simulated robot"
    finally:
        codes = nodes.stop()
        probe.close()
    assert codes == {"sim_robot": 0, "policy_node": 0}, nodes.log("sim_robot") + nodes.log("policy_node")
