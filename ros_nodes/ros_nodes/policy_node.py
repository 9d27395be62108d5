"""Policy runner: state topics in, safe position targets out, at the artifact's control rate.

Subscribes JointState (+ Imu, + Twist velocity command, + PoseStamped target, + PoseStamped object
(cube) pose, as the policy's observation terms require), rebuilds the training observation
(:mod:`robot_rl.deploy.observation`),
runs the ONNX policy (a VLA artifact, ``inputs: vla``: camera images, an instruction and the measured joint
positions instead, :mod:`ros_nodes.vla_inputs`; a missing, stale or bad image or instruction holds the command),
passes the target through the safety layer (:mod:`robot_rl.deploy.safety`)
and publishes a Float64MultiArray or JointTrajectory. A tick runs in the callback of the first
JointState after each control period (event-driven: lowest latency), or from a watchdog timer one
period after the last tick when states stop.

Topics (relative: a namespace applies): ``estop`` (std_msgs/Bool, True latches), ``sim/episode``
(std_msgs/Float64MultiArray from the simulated robot in sim2sim: an episode ended and the robot was reset, so
the node drops its chunk plans, zeroes its last action and restarts its gait clock, as the training env does at a
reset, forgets its last command, and a VLA node its images from before the reset), ``diagnostics``
(diagnostic_msgs/DiagnosticArray, 1 Hz). Service ``~/enable`` (std_srvs/SetBool): True clears the
e-stop and soft-starts from the measured pose, False stops sending.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, Twist
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.artifact import ArtifactError, load_meta
from robot_rl.deploy.observation import ObservationBuilder, RobotState, reorder_index
from robot_rl.deploy.runtime import PolicyRuntime, chunk_executor
from robot_rl.deploy.safety import (
    SafetyConfig,
    SafetyState,
    forget_last_command,
    latch_estop,
    safety_step,
    set_enabled,
)
from robot_rl.deploy.validate import RobotSpec, check_control_hz
from robot_rl.deploy.vla_runtime import VLARuntime
from robot_rl.errors import EXIT_BAD_INPUT, InputError
from ros_nodes import spin
from ros_nodes.messages import (
    CommandMessage,
    command_class,
    imu_arrays,
    joint_state_arrays,
    pose_position,
    twist_command,
)
from ros_nodes.params import declare
from ros_nodes.stats import LoopStats
from ros_nodes.vla_inputs import VLAInputs

PARAMS = {
    "policy": (str, None),
    "robot": (str, None),
    "joint_names": ("str[]", None),
    "lower": ("float[]", None),
    "upper": ("float[]", None),
    "default_joint_pos": ("float[]", None),  # robot.yaml's default pose: the artifact's must match it
    "max_step_change": ("float[]", None),
    "stale_state_timeout": (float, None),
    "soft_start_s": (float, None),
    "estop_mode": (str, "hold"),
    "control_hz": (float, 0.0),  # 0: the artifact's rate
    "joint_states_topic": (str, "joint_states"),
    "imu_topic": (str, "imu"),
    "velocity_command_topic": (str, "cmd_vel"),
    "target_topic": (str, "target_pose"),
    "object_topic": (str, "object_pose"),
    "base_frame": (str, ""),
    "command_topic": (str, None),
    "command_type": (str, None),
    "start_enabled": (bool, True),
    "stats_file": (str, ""),
    "stats_samples": (bool, False),  # stats_file also holds every kept tick's timings (benchmarks)
    "stats_capacity": (int, 4096),  # ticks kept for the statistics (4096: 82 s at 50 Hz)
    "executor": (str, "single"),  # single | events (rclpy's EventsExecutor)
    "rt_priority": (int, 0),  # > 0: SCHED_FIFO at this priority for the whole node (needs rtprio rights)
    "image_timeout": (float, 0.5),  # VLA artifacts: hold when a camera's latest image is older (s)
    "run_untrained_instructions": (bool, False),  # VLA artifacts: run an instruction outside policy.yaml's set
}


class PolicyNode(Node):
    """The policy runner; raises InputError (ArtifactError) or ValueError before creating any publisher if
    misconfigured: the parameters and the artifact go through the same validation as ``deploy check``."""

    def __init__(self, node_name: str = "policy_node") -> None:
        super().__init__(node_name)
        p = declare(self, PARAMS)
        self.p = p
        # every number is validated before the artifact is opened and before any publisher exists
        source = f"{self.get_name()} parameters"
        step = p["max_step_change"]
        self.safety_cfg = SafetyConfig(
            lower=p["lower"],
            upper=p["upper"],
            max_step_change=step * len(p["joint_names"]) if len(step) == 1 else step,
            stale_state_timeout=p["stale_state_timeout"],
            soft_start_s=p["soft_start_s"],
            estop_mode=p["estop_mode"],
            source=source,
        )
        if self.safety_cfg.lower.size != len(p["joint_names"]):
            raise InputError(f"has {len(p['joint_names'])} joints but {self.safety_cfg.lower.size} limits",
                             file=source, key="joint_names", value=p["joint_names"],
                             fix="regenerate the parameters with robot-rl ros params <robot>")
        robot = RobotSpec(source, p["joint_names"], self.safety_cfg.lower, self.safety_cfg.upper,
                          np.asarray(p["default_joint_pos"], dtype=np.float64))
        control_hz = check_control_hz(p["control_hz"], source)
        vla = load_meta(p["policy"]).vla is not None
        self.runtime = (VLARuntime if vla else PolicyRuntime)(p["policy"], robot=robot)
        self.meta = self.runtime.meta
        A = self.meta.action_dim
        self.safety = SafetyState(enabled=p["start_enabled"])
        self.period = 1.0 / (control_hz or self.meta.control_hz)
        self.chunks = chunk_executor(self.meta)  # policy.yaml's chunk_execution: as training collected
        self.command_type = p["command_type"]
        terms = {t.name for t in self.meta.observation}

        self.state = RobotState(joint_pos=np.zeros(A), joint_vel=np.zeros(A))
        self.measured: np.ndarray | None = None
        self.state_time: float | None = None
        self.state_stamp = 0.0
        self.last_action = np.zeros(A)
        self._gait_steps = 0  # policy steps since start, enable or episode reset: the gait_phase clock
        self._index_cache: tuple[tuple[str, ...], np.ndarray] | None = None
        self._next_tick = 0.0
        self._bad_state_logged = False
        self._receive_ms = float("nan")
        self._inference_ms = float("nan")
        self._image_age_ms = float("nan")
        self._next_diagnostics = 0.0
        self.stats = LoopStats(p["stats_capacity"])
        self.observation = ObservationBuilder(self.meta)
        self.command = CommandMessage(self.command_type, self.meta.joint_names, self.period)
        self._no_chunk = np.zeros((0, self.meta.chunk_length, A))  # a step that plays a chunk already held

        self.pub = self.create_publisher(command_class(self.command_type), p["command_topic"], 10)
        self.diag_pub = self.create_publisher(DiagnosticArray, "diagnostics", 10)
        # sensor data (best effort) keeping only the newest message: a node that falls behind (CPU
        # starved) takes the freshest state instead of working through a queue of old ones
        sensor_qos = QoSProfile(depth=1, reliability=qos_profile_sensor_data.reliability,
                                durability=qos_profile_sensor_data.durability)
        self.create_subscription(JointState, p["joint_states_topic"], self._on_joint_state, sensor_qos)
        if terms & {"base_ang_vel", "projected_gravity"}:
            self.create_subscription(Imu, p["imu_topic"], self._on_imu, sensor_qos)
        if "velocity_command" in terms:
            self.create_subscription(Twist, p["velocity_command_topic"], self._on_twist, 10)
        if "target_pos" in terms:
            self.create_subscription(PoseStamped, p["target_topic"], self._on_target, 10)
        if "cube_pos" in terms:
            self.create_subscription(PoseStamped, p["object_topic"], self._on_object, 10)
        self.vla = VLAInputs(self, self.runtime, p["image_timeout"], self.chunks.reset,
                             p["run_untrained_instructions"]) if vla else None
        self.create_subscription(Bool, "estop", self._on_estop, 10)
        self.create_subscription(Float64MultiArray, "sim/episode", self._on_episode_end, 10)
        self.create_service(SetBool, "~/enable", self._on_enable)
        self._watchdog = self.create_timer(self.period, self._on_watchdog_timer)
        self.get_logger().info(
            f"policy {p['policy']} ({self.meta.task or 'task ?'}) for {self.meta.robot}: {A} joints, "
            f"{1.0 / self.period:g} Hz, chunk {self.meta.chunk_length} ({self.meta.chunk_execution}), "
            f"commands on {self.pub.topic_name} as {self.command_type}"
        )

    # ---------------------------------------------------------------- inputs
    def _on_joint_state(self, msg: JointState) -> None:
        now = time.monotonic()
        names = tuple(msg.name)
        try:
            if self._index_cache is None or self._index_cache[0] != names:
                self._index_cache = (names, reorder_index(list(names), self.meta.joint_names))
            pos, vel = joint_state_arrays(msg, self._index_cache[1])
            if not (np.isfinite(pos).all() and np.isfinite(vel).all()):
                raise ValueError(f"non-finite JointState position {pos} / velocity {vel}")
        except (ArtifactError, ValueError, IndexError) as exc:
            if not self._bad_state_logged:
                self.get_logger().error(f"ignoring invalid JointState (no command from it): {exc}")
                self._bad_state_logged = True
            self.stats.count("invalid_state")
            return
        self.state.joint_pos, self.state.joint_vel = pos, vel
        self.measured, self.state_time = pos, now
        self.state_stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if now >= self._next_tick:  # event-driven: the first state of a period runs the tick right here
            self._receive_ms = 1e3 * (time.time() - self.state_stamp)
            self._tick(now)

    def _on_imu(self, msg: Imu) -> None:
        self.state.imu_quat_wxyz, self.state.imu_gyro = imu_arrays(msg)

    def _on_twist(self, msg: Twist) -> None:
        self.state.velocity_command = twist_command(msg)

    def _base_frame_position(self, msg: PoseStamped, what: str) -> np.ndarray | None:
        """``[3]`` position of a pose in the base frame, or None (logged) when it is in another frame."""
        frame = msg.header.frame_id
        if frame and self.p["base_frame"] and frame != self.p["base_frame"]:
            self.get_logger().error(
                f"{what} in frame {frame!r} ignored: the policy needs it in {self.p['base_frame']!r}"
            )
            return None
        return pose_position(msg)

    def _on_target(self, msg: PoseStamped) -> None:
        position = self._base_frame_position(msg, "target")
        if position is not None:
            self.state.target_pos = position

    def _on_object(self, msg: PoseStamped) -> None:
        position = self._base_frame_position(msg, "object pose")
        if position is not None:
            self.state.cube_pos = position

    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self.safety.estopped:
            self.safety = latch_estop(self.safety, self.measured)
            self.chunks.reset()
            self.get_logger().warning("E-STOP latched: holding; call ~/enable true to resume")

    def _on_episode_end(self, _msg: Float64MultiArray) -> None:
        """The simulated robot reset arm and scene: as after an env reset, no plan in flight, a zero last action, no
        last command to hold or rate-limit from (the measured reset pose is the base), and, for a VLA, no camera image
        from before the reset (it holds until an image stamped after this message arrives)."""
        self.chunks.reset()
        self.last_action[:] = 0.0
        self._gait_steps = 0
        self.safety = forget_last_command(self.safety)
        if self.vla is not None:
            self.vla.forget_images(self.get_clock().now().nanoseconds)

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.safety = set_enabled(self.safety, request.data)
        self.chunks.reset()
        self._gait_steps = 0
        response.success = True
        response.message = "enabled (soft start)" if request.data else "disabled: sending nothing"
        self.get_logger().info(response.message)
        return response

    # ---------------------------------------------------------------- control loop
    def _on_watchdog_timer(self) -> None:
        """Fires one period after the last tick (reset there): ticks when no JointState did.

        While states flow (the latest is less than one period old) it leaves the tick to the JointState
        callback: rclpy runs ready timers before ready subscriptions, so ticking here would use the
        previous state while the fresh one waits in the queue.
        """
        now = time.monotonic()
        flowing = self.state_time is not None and now - self.state_time < self.period
        if now >= self._next_tick - 0.002 and not flowing:
            self._receive_ms = float("nan")
            self.stats.count("watchdog_ticks")
            self._tick(now)

    def _policy_target(self, now: float) -> np.ndarray | None:
        """``[A]`` policy target for this tick, or None when an input is missing."""
        if self.vla is not None:
            return self._vla_target(now)
        self.state.gait_time_s = self._gait_steps * self.period
        try:
            obs = self.observation.build(self.state, self.last_action)
        except ValueError as exc:
            self.get_logger().warning(f"no policy step: {exc}", throttle_duration_sec=2.0)
            return None
        self._gait_steps += 1
        chunks = self._no_chunk
        if self.chunks.needs_query()[0]:
            t0 = time.perf_counter()
            chunks = self.runtime.infer(obs)[None]
            self._inference_ms = 1e3 * (time.perf_counter() - t0)
            self.stats.count("inferences")
        return self.chunks.step(chunks)[0]

    def _vla_target(self, now: float) -> np.ndarray | None:
        """``[A]`` target of a VLA policy, or None (logged) while an image or the instruction is missing or bad: the
        plan in flight is dropped then, since it was made from older inputs."""
        why = self.vla.missing(now)
        hold, chunks = why is not None, self._no_chunk
        if hold:
            self.vla.log("missing", f"holding the command: {why}", expected=self.vla.waiting_for_new_scene(now))
        elif self.chunks.needs_query()[0]:
            t0 = time.perf_counter()
            chunk = self.vla.chunk(self.state.joint_pos)  # None (logged) when the runtime refuses an input
            self._inference_ms = 1e3 * (time.perf_counter() - t0)
            # how much older than the joint state the query's camera frames are (both stamped by the robot's clock)
            self._image_age_ms = 1e3 * (self.state_stamp - self.vla.oldest_stamp())
            self.stats.count("inferences")
            hold = chunk is None
            chunks = self._no_chunk if hold else chunk[None]
        if hold:
            self.stats.count("vla_hold")
            self.chunks.reset()
            return None
        return self.chunks.step(chunks)[0]

    def _tick(self, now: float) -> None:
        """One control step from the latest state; ``now`` is when its JointState (or the watchdog) arrived."""
        on_time = now - self._next_tick < self.period
        self._next_tick = self._next_tick + self.period if on_time else now + self.period
        self._watchdog.reset()
        self._inference_ms = self._image_age_ms = float("nan")
        fresh = self.measured is not None and self.safety.enabled and not self.safety.estopped
        stale = self.state_time is None or now - self.state_time > self.safety_cfg.stale_state_timeout
        target = self._policy_target(now) if fresh and not stale else None
        out = safety_step(self.safety_cfg, self.safety, target, self.measured, now, self.state_time)
        if "stale" in out.events and not self.safety.stale:
            late_ms = 1e3 * (now - self.state_time - self.safety_cfg.stale_state_timeout) if self.state_time else 0.0
            self.stats.sample("watchdog_delay_ms", late_ms)
            self.get_logger().error(f"JointState stale: holding the last command ({late_ms:.1f} ms after timeout)")
            self.chunks.reset()
        self.safety = out.state
        for event in out.events:
            self.stats.count(event)
        if target is not None and np.isfinite(target).all():
            to_raw(self.meta.action, target, out=self.last_action)
        if out.command is not None:
            self.pub.publish(self.command.fill(out.command))
            latency = float("nan") if "stale" in out.events else 1e3 * (time.time() - self.state_stamp)
            self.stats.tick(now, latency, self._receive_ms, 1e3 * (time.monotonic() - now), self._inference_ms,
                            self._image_age_ms)
        if now >= self._next_diagnostics:  # after the command: its cost never delays one
            self._next_diagnostics = now + 1.0
            self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        """Loop statistics over the kept ticks and the intervention counts, as one DiagnosticStatus."""
        summary = self.stats.summary()
        level = DiagnosticStatus.WARN if (self.safety.estopped or self.safety.stale) else DiagnosticStatus.OK
        status = DiagnosticStatus(
            level=level,
            name=f"{self.get_name()}: policy",
            message="e-stop" if self.safety.estopped else ("stale state" if self.safety.stale else "running"),
            hardware_id=self.meta.robot,
            values=[KeyValue(key=k, value=f"{v:.6g}") for k, v in summary.items()],
        )
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    def write_stats(self) -> None:
        """Dump the loop statistics to ``stats_file`` (JSON) when set."""
        if self.p["stats_file"]:
            summary: dict = self.stats.summary()
            if self.p["stats_samples"]:
                summary["samples"] = self.stats.raw()
            with open(self.p["stats_file"], "w") as f:
                json.dump(summary, f, indent=1)


def main(args: list[str] | None = None) -> int:
    """Console entry point ``policy_node`` (``--ros-args ...`` as from a launch file)."""
    stop = spin.init(args)
    try:
        node = PolicyNode()
    except (ArtifactError, ValueError) as exc:
        rclpy.logging.get_logger("policy_node").fatal(f"refusing to start: {exc}")
        rclpy.try_shutdown()
        return EXIT_BAD_INPUT
    executor = make_executor(node.p["executor"])
    executor.add_node(node)
    if node.p["rt_priority"]:
        try:
            count = spin.set_realtime(node.p["rt_priority"])
            node.get_logger().info(f"real-time scheduling: SCHED_FIFO {node.p['rt_priority']} on {count} threads")
        except (PermissionError, ValueError) as exc:
            node.get_logger().warning(f"normal scheduling: {exc}")
    try:
        # SingleThreadedExecutor: no wait slice (the watchdog timer wakes it at least once per period); the
        # EventsExecutor keeps the 50 ms slice (without one it did not return to Python to see SIGINT)
        spin.spin(executor, stop, timeout_sec=None if isinstance(executor, SingleThreadedExecutor) else 0.05)
    finally:
        node.write_stats()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def make_executor(name: str) -> Executor:
    """``single`` (rclpy's default SingleThreadedExecutor) or ``events`` (rclpy's EventsExecutor)."""
    if name == "events":
        return EventsExecutor()
    if name != "single":
        raise ValueError(f"executor {name!r} must be 'single' or 'events'.")
    return SingleThreadedExecutor()


if __name__ == "__main__":
    sys.exit(main())
