"""A rosbag2 recorded from the MuJoCo simulated robot node over real DDS, then converted to a dataset.

The test plays `ros2 bag record`: raw (serialized CDR) subscriptions to the robot's JointState and
command topics keep every message with its receive time, written afterwards into an MCAP and a
sqlite3 bag with rosbags' writer (sqlite3 objects may not cross threads), while the test publishes
two bursts of position commands the simulated robot follows. Both bags must convert into the same
two episodes, whose actions are the commands sent and whose states are the simulated robot's motion.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import qos_profile_sensor_data
from ros_support import fresh_domain_id
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.rosbag import bag_to_dataset
from robot_rl.demos.ros_launch import DemoNodes, write_demo_params
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
DEFAULT = np.array([j.default for j in ROBOT.joints])
COMMANDS = "/forward_position_controller/commands"
FPS = 25


def test_bag_recorded_from_the_sim_robot_converts_in_both_storages(tmp_path):
    domain = fresh_domain_id()
    nodes = DemoNodes([("sim_robot_node", "sim_robot", {"publish_hz": 100.0})],
                      write_demo_params(ROBOT.as_dict(), tmp_path / "params.yaml"), domain, tmp_path / "logs")
    lock = threading.Lock()
    received: list[tuple[str, int, bytes]] = []  # (topic, receive time ns, serialized CDR)
    counts = {"/joint_states": 0, COMMANDS: 0}

    def record(topic: str):
        def callback(raw: bytes) -> None:
            with lock:
                received.append((topic, time.time_ns(), raw))
                counts[topic] += 1
        return callback

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("bag_recorder", context=context)
    node.create_subscription(JointState, "/joint_states", record("/joint_states"), qos_profile_sensor_data, raw=True)
    node.create_subscription(Float64MultiArray, COMMANDS, record(COMMANDS), 50, raw=True)
    pub = node.create_publisher(Float64MultiArray, COMMANDS, 10)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    sent: list[np.ndarray] = []
    try:
        deadline = time.monotonic() + 60
        while counts["/joint_states"] < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counts["/joint_states"] >= 10, nodes.log("sim_robot")
        for burst in range(2):  # two 1.5 s bursts of a 0.5 Hz sway at 50 Hz, 1 s apart
            t0 = time.monotonic()
            while (t := time.monotonic() - t0) < 1.5:
                target = DEFAULT + (0.2 + 0.1 * burst) * np.sin(np.pi * t)
                pub.publish(Float64MultiArray(data=target.tolist()))
                sent.append(target)
                time.sleep(0.02)
            time.sleep(1.0)
    finally:
        executor.shutdown()
        spinner.join(timeout=5)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        nodes.stop()
    typestore = get_typestore(Stores.ROS2_KILTED)  # sqlite3 writes from this thread only: written afterwards
    for storage in StoragePlugin:
        with Writer(tmp_path / storage.name.lower(), version=9, storage_plugin=storage) as writer:
            conns = {
                "/joint_states": writer.add_connection("/joint_states", "sensor_msgs/msg/JointState",
                                                       typestore=typestore),
                COMMANDS: writer.add_connection(COMMANDS, "std_msgs/msg/Float64MultiArray", typestore=typestore),
            }
            for topic, stamp, raw in received:
                writer.write(conns[topic], stamp, raw)
    datasets = {}
    for storage in StoragePlugin:
        out = tmp_path / f"ds_{storage.name.lower()}"
        summary = bag_to_dataset([tmp_path / storage.name.lower()], ROBOT.as_dict(), out, fps=FPS, gap_s=0.5,
                                 task="sway")
        assert summary.episodes == 2, summary
        datasets[storage] = LeRobotDataset(out)
    mcap, sqlite = datasets[StoragePlugin.MCAP], datasets[StoragePlugin.SQLITE3]
    sent_set = {tuple(np.float32(s)) for s in sent}
    for ep in range(2):
        a, b = mcap.episode(ep), sqlite.episode(ep)
        for key in ("observation.state", "observation.velocity", "action"):
            np.testing.assert_array_equal(a[key], b[key])  # the same messages, whatever the storage
        state, action = a["observation.state"], a["action"]
        assert 1.2 * FPS <= len(action) <= 1.6 * FPS, len(action)
        assert all(tuple(row) in sent_set for row in action)  # every action is a command the test sent
        # the simulated robot followed: its joints sway with the commands, one frame behind at most
        assert state[:, 1].max() - state[:, 1].min() > 0.2
        assert float(np.median(np.abs(state[1:] - action[:-1]))) < 0.05
