"""The camera and instruction inputs of the policy node when it runs a VLA artifact (``inputs: vla``).

One ``sensor_msgs/Image`` subscription per camera of policy.yaml (``vla.image_topics``, relative: the node's
namespace and ``--ros-args -r`` remappings apply; best effort, depth 1: the newest image wins) and one
``std_msgs/String`` subscription on ``vla.instruction_topic`` (reliable, depth 1). :meth:`VLAInputs.chunk` runs
:class:`~robot_rl.deploy.vla_runtime.VLARuntime` on the latest of each, or returns None, logging why at most
every 2 s, when the node must hold its command instead: no image yet from a camera, an image older than
``image_timeout``, an image that is not rgb8 or not the policy's size, no (valid) instruction. Never raises on
bad input.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from rclpy.time import Time
from sensor_msgs.msg import Image
from std_msgs.msg import String

from robot_rl.deploy.instruction import quoted
from robot_rl.deploy.vla_runtime import VLARuntime
from robot_rl.errors import InputError
from ros_nodes.messages import image_array

LOG_PERIOD_S = 2.0
"""Seconds between two log lines about the same missing or bad input."""


class VLAInputs:
    """Latest camera images and instruction of a VLA policy node.

    Args:
        node: the policy node (subscriptions and logger).
        runtime: the artifact's runtime.
        image_timeout: seconds after which an image is stale (hold).
        on_instruction: called when the instruction changes (the node drops its chunk plans).
        run_untrained: run an instruction that is none of policy.yaml's ``vla.instructions`` (with a warning);
            False (the node's default): hold on it and log why, as on an empty one.
    """

    def __init__(self, node: Node, runtime: VLARuntime, image_timeout: float,
                 on_instruction: Callable[[], None], run_untrained: bool = False) -> None:
        if not image_timeout > 0:
            raise ValueError(f"parameter 'image_timeout' must be > 0 s, got {image_timeout}")
        self.node, self.runtime, self.timeout = node, runtime, image_timeout
        self.run_untrained = run_untrained
        self.on_instruction = on_instruction
        self.images: dict[str, np.ndarray] = {}
        self.image_time: dict[str, float] = {}  # monotonic arrival
        self.image_stamp: dict[str, float] = {}  # header stamp (s)
        self.not_before_ns = 0  # images stamped earlier are ignored (forget_images)
        self.reset_time = -math.inf  # monotonic time of the last forget_images
        self.instruction: str | None = None
        self._last_log: dict[str, float] = {}
        vla = runtime.vla
        sensor_qos = QoSProfile(depth=1, reliability=qos_profile_sensor_data.reliability,
                                durability=qos_profile_sensor_data.durability)
        self.topics = {}
        for camera, topic in zip(vla.cameras, vla.image_topics, strict=True):
            sub = node.create_subscription(Image, topic, lambda msg, c=camera: self._on_image(c, msg), sensor_qos)
            self.topics[camera] = sub.topic_name
        self.instruction_topic = node.create_subscription(String, vla.instruction_topic, self._on_instruction,
                                                          QoSProfile(depth=1)).topic_name

    def log(self, key: str, text: str, expected: bool = False) -> None:
        """Log ``text`` unless ``key`` was logged less than :data:`LOG_PERIOD_S` ago: as info when ``expected``,
        else as a warning."""
        now = time.monotonic()
        if now - self._last_log.get(key, -LOG_PERIOD_S) >= LOG_PERIOD_S:
            self._last_log[key] = now
            if expected:  # two call sites: rclpy refuses a severity change at one
                self.node.get_logger().info(text)
            else:
                self.node.get_logger().warning(text)

    def forget_images(self, stamp_ns: int) -> None:
        """Drop the images held and ignore any stamped before ``stamp_ns`` (ROS time, ns): the scene was reset
        (sim2sim's episode end), so an image in flight from before it shows another scene. The node holds until every
        camera's first image of the new scene arrives (logged as info for ``image_timeout``, then as a warning)."""
        self.images.clear()
        self.image_time.clear()
        self.image_stamp.clear()
        self.not_before_ns = stamp_ns
        self.reset_time = time.monotonic()
        self._last_log.clear()  # a new episode: its first hold is logged whenever the last one was

    def _on_image(self, camera: str, msg: Image) -> None:
        stamp_ns = Time.from_msg(msg.header.stamp).nanoseconds
        if stamp_ns < self.not_before_ns:
            return
        try:
            self.images[camera] = image_array(msg)
        except ValueError as exc:
            self.images.pop(camera, None)
            self.log(f"image {camera}", f"holding: camera {camera!r} on {self.topics[camera]}: {exc}")
            return
        self.image_time[camera] = time.monotonic()
        self.image_stamp[camera] = stamp_ns * 1e-9

    def oldest_stamp(self) -> float:
        """Header stamp (s) of the oldest of the latest images (the cameras' frames a query now would see)."""
        return min(self.image_stamp.values())

    def _on_instruction(self, msg: String) -> None:
        if msg.data == self.instruction:
            return
        try:
            warnings = self.runtime.set_instruction(msg.data, allow_untrained=self.run_untrained)
        except InputError as exc:
            self.instruction = None
            self.log("instruction", f"holding: instruction refused: {exc}")
            self.on_instruction()
            return
        for warning in warnings:
            self.node.get_logger().warning(warning)
        self.instruction = msg.data
        self.node.get_logger().info(f"instruction: {quoted(msg.data)}")
        self.on_instruction()

    def waiting_for_new_scene(self, now: float) -> bool:
        """True while a camera has no image yet within ``image_timeout`` of :meth:`forget_images` (monotonic ``now``):
        the expected wait for the reset scene's first frame, not yet a fault (what :meth:`missing` then reports)."""
        return now - self.reset_time <= self.timeout and any(c not in self.images for c in self.runtime.vla.cameras)

    def missing(self, now: float) -> str | None:
        """Why no chunk can be computed at monotonic time ``now`` (a phrase), or None when every input is there."""
        waiting = self.waiting_for_new_scene(now)
        for camera in self.runtime.vla.cameras:
            if camera not in self.images:
                if waiting:
                    return f"waiting for the new episode's first image from camera {camera!r} ({self.topics[camera]})"
                return f"no image yet from camera {camera!r} ({self.topics[camera]})"
            age = now - self.image_time[camera]
            if age > self.timeout:
                return f"camera {camera!r} image is {age:.2f} s old (image_timeout {self.timeout:g} s)"
        if self.instruction is None:
            return f"no instruction yet on {self.instruction_topic} (std_msgs/String)"
        return None

    def chunk(self, joint_pos: np.ndarray) -> np.ndarray | None:
        """Joint targets ``[H, A]`` from the latest images, the instruction and ``joint_pos [A]``; None (logged)
        when the runtime refuses an input (an image of another size, a NaN state)."""
        try:
            return self.runtime.infer(self.images, self.instruction, joint_pos)
        except InputError as exc:
            self.log("infer", f"holding: {exc}")
            return None
