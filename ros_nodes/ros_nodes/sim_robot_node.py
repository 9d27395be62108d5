"""Simulated robot: MuJoCo in real time behind the same topics as the real driver.

Publishes JointState (+ Imu for a floating base) at ``publish_hz`` and accepts the robot's
command message (Float64MultiArray or JointTrajectory position targets), applied to the PD
position actuators that :func:`sim.robots.build_model` rebuilds from ``robot.yaml``. Sensor noise
(Gaussian, on positions and velocities) and a command latency make it a fair stand-in for
hardware in sim-to-sim tests and CI.

Timing: physics runs on a fixed grid ``t0 + k * physics_dt`` (``t0`` = the first timer tick), stepped
up to the current wall time at every timer tick, and the state of the latest grid point is published
right away. A command received at wall time ``r`` takes effect at the grid step nearest to
``r + command_latency_s``: physics is stepped to that point with the previous command first, so the
latency is what the parameter says (plus DDS transport), never shortened by when the timer runs.

With ``task: so101_reach`` it also plays that task's episodes: every ``episode_s`` it samples a
target from the training env's own target table (or the gripper position at the fixed
``target_joint_pos`` configuration), publishes it as a PoseStamped in the base frame, and at the
end of the episode publishes ``sim/episode`` = Float64MultiArray [index, success, final distance m]
(success: the task's ``success_radius``).

With ``task: so101_lift`` (a task whose policy observes ``cube_pos``) it simulates that task's scene (the
model of ``sim.make_env(task, 1).mujoco_view()``: robot, floor, cube), starts every episode from the
task's own reset distribution (arm and cube, a ``reset()`` of that env), publishes the cube position in the
base frame as a PoseStamped on ``object_topic`` every control period, scores the task's own success rule
every control period (``TaskEnv.score_state``: lift height held for ``hold_steps``, gripper at the cube) and
ends the episode on success or after ``episode_s``, publishing ``sim/episode`` = [index, success, final
gripper-to-cube distance m]. ``episode_s: 0`` (the default) is the task's own episode length.

With a language task (``task: so101_reach_lang`` or ``so101_pick_lang``, an env with ``has_instructions``) it
simulates the task's scene (arm, coloured targets or cubes, cameras), starts every episode from the task's reset
(arm, targets or cubes and one instruction drawn by the task), publishes the instruction (std_msgs/String on
``instruction_topic``, at the episode start and every 0.5 s) and the images of ``cameras`` (comma-separated MJCF
camera names, e.g. ``front,wrist``; ``image_size`` pixels square; rgb8 sensor_msgs/Image on
``camera/<name>/image_raw``), rendered with :class:`sim.render.CameraGroup`'s small-image settings (EGL where
``MUJOCO_GL=egl``, else OSMesa) in a thread of their own from the state of each control period (frames are dropped
when rendering is slower; the image stamp is the state's time). Reach: at the end of ``episode_s`` it publishes
``sim/episode`` = [index, success, final distance m] for the named target (success: the task's ``success_radius``).
Pick: it scores the task's own success rule every control period (``TaskEnv.score_state``: the named cube lifted and
held, the gripper at it) and ends the episode on success or after ``episode_s``, publishing [index, success, final
gripper-to-named-cube distance m].

With a locomotion task (``task: g1_stand`` or ``g1_walk``: a floating base and the task's fall terminations) it
starts every episode from the task's reset, publishes the task's velocity command (geometry_msgs/Twist on
``velocity_command_topic``, zero for g1_stand; held at the reset's draw for the episode) every control period,
pushes the base as the task's randomisation does (``push_interval_s``, ``push_velocity``: planar velocity added
to the free joint), checks the task's terminations every control period (``TaskEnv.terminated_state``) and ends
the episode on a fall or after ``episode_s``, publishing ``sim/episode`` = [index, survived (1/0), episode
length s].
"""

from __future__ import annotations

import copy
import math
import sys
import threading
import time
from collections import deque

import mujoco
import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped, Twist
from rclpy.node import Node
from sensor_msgs.msg import Image, Imu, JointState
from std_msgs.msg import Float64MultiArray, String

import sim
from ros_nodes import spin
from ros_nodes.messages import command_class, command_positions, image_message
from ros_nodes.params import declare
from sim.randomization import base_planar_dofs
from sim.robots import add_floor_and_light, build_model, load_robot, site_name

PARAMS = {
    "robot": (str, None),
    "physics_dt": (float, 0.0),  # 0: robot.yaml's control.physics_dt
    "publish_hz": (float, 0.0),  # 0: the physics rate
    "joint_states_topic": (str, "joint_states"),
    "imu_topic": (str, "imu"),
    "command_topic": (str, None),
    "command_type": (str, None),
    "position_noise": (float, 0.0),  # rad, std
    "velocity_noise": (float, 0.0),  # rad/s, std
    "command_latency_s": (float, 0.0),
    "seed": (int, 0),
    "task": (str, ""),  # "" or a reach, lift, language or locomotion task name: play its episodes
    "target_topic": (str, "target_pose"),
    "object_topic": (str, "object_pose"),
    "base_frame": (str, "base"),
    "episode_s": (float, 0.0),  # 0: the task's own episode length
    "success_radius": (float, 0.02),
    "target_joint_pos": ("float[]", []),
    "cameras": (str, ""),  # language tasks: comma-separated cameras to publish (e.g. "front,wrist")
    "image_size": (int, 64),  # their images' height and width (pixels)
    "instruction_topic": (str, "instruction"),
    "velocity_command_topic": (str, "cmd_vel"),  # locomotion tasks: the task's velocity command out
}
MAX_CATCH_UP_STEPS = 50


class SimRobotNode(Node):
    """MuJoCo robot stepped in real time by a wall timer; PD control runs inside MuJoCo."""

    def __init__(self, node_name: str = "sim_robot", context: rclpy.Context | None = None) -> None:
        super().__init__(node_name, context=context)
        p = declare(self, {k: v for k, v in PARAMS.items() if k != "target_joint_pos"})
        self.declare_parameter("target_joint_pos", [0.0])
        self.target_joint_pos = list(self.get_parameter("target_joint_pos").value)
        self.p = p
        self.robot = load_robot(p["robot"])
        self.task_env = sim.make_env(p["task"], num_envs=1, seed=p["seed"]) if p["task"] else None
        scene_task = self.task_env is not None and (not self.task_env.has_target or self.task_env.has_instructions)
        if scene_task:  # an object or language task: the task's scene
            self.model = copy.deepcopy(self.task_env.mujoco_view(0)[0])
        else:
            self.model = build_model(self.robot, add_floor_and_light)
        self.model.opt.timestep = p["physics_dt"] or self.robot.control.physics_dt
        self.data = mujoco.MjData(self.model)
        self.names = self.robot.joint_names
        self.qadr = np.array([self.model.jnt_qposadr[self.model.joint(n).id] for n in self.names])
        self.vadr = np.array([self.model.jnt_dofadr[self.model.joint(n).id] for n in self.names])
        default = np.array([j.default for j in self.robot.joints])
        self.data.qpos[self.qadr] = default
        self.data.ctrl[:] = default
        mujoco.mj_forward(self.model, self.data)
        self.floating = self.model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
        self.rng = np.random.default_rng(p["seed"])
        self.pending: deque[tuple[float, np.ndarray]] = deque()

        self.js_pub = self.create_publisher(JointState, p["joint_states_topic"], 10)
        self.imu_pub = self.create_publisher(Imu, p["imu_topic"], 10) if self.floating else None
        self.create_subscription(command_class(p["command_type"]), p["command_topic"], self._on_command, 10)
        self.task = None
        if self.task_env is not None:
            self.task = _task_kind(self.task_env)(self)
        dt = self.model.opt.timestep
        publish_hz = p["publish_hz"] or 1.0 / dt
        self.t0: float | None = None  # wall time of physics step 0, set by the first timer tick
        self.steps = 0
        self.js_msg = JointState(name=self.names)
        self._noise = np.zeros(len(self.names))
        self.create_timer(1.0 / publish_hz, self._on_timer)
        self.get_logger().info(
            f"simulated {self.robot.name}: physics {1 / dt:g} Hz, joint states {publish_hz:g} Hz "
            f"on {self.js_pub.topic_name}, commands from {p['command_topic']} ({p['command_type']}), "
            f"latency {p['command_latency_s'] * 1e3:g} ms, noise {p['position_noise']:g} rad"
        )

    def _on_command(self, msg) -> None:
        try:
            target = command_positions(msg, self.names)
        except ValueError as exc:
            self.get_logger().error(f"command ignored: {exc}", throttle_duration_sec=2.0)
            return
        self.pending.append((time.monotonic() + self.p["command_latency_s"], target))

    def _on_timer(self) -> None:
        now = time.monotonic()
        dt = self.model.opt.timestep
        if self.t0 is None:
            self.t0 = now
        goal = int((now - self.t0) / dt)
        if goal - self.steps > MAX_CATCH_UP_STEPS:  # far behind (CPU starved): drop time rather than burst
            self.t0 += (goal - self.steps - MAX_CATCH_UP_STEPS) * dt
            goal = self.steps + MAX_CATCH_UP_STEPS
        # each command due by the goal takes effect at the grid step nearest its due time
        while self.pending and self.pending[0][0] <= self.t0 + (goal + 0.5) * dt:
            due, target = self.pending.popleft()
            self._step_to(min(goal, math.floor((due - self.t0) / dt + 0.5)))
            self.data.ctrl[:] = target
        self._step_to(goal)
        self._publish_state()
        if self.task is not None:
            self.task.update(self.steps * self.model.opt.timestep)

    def _step_to(self, step: int) -> None:
        """Advance physics to grid step ``step`` (no-op if it is already there or past it)."""
        if step > self.steps:
            mujoco.mj_step(self.model, self.data, nstep=step - self.steps)
            self.steps = step

    def _publish_state(self) -> None:
        stamp = self.get_clock().now().to_msg()
        msg = self.js_msg
        noise = self._noise
        self.rng.standard_normal(out=noise)
        msg.position = self.data.qpos[self.qadr] + self.p["position_noise"] * noise
        self.rng.standard_normal(out=noise)
        msg.velocity = self.data.qvel[self.vadr] + self.p["velocity_noise"] * noise
        msg.effort = self.data.actuator_force
        msg.header.stamp = stamp
        self.js_pub.publish(msg)
        if self.imu_pub is not None:
            imu = Imu()
            imu.header.stamp = stamp
            w, x, y, z = self.data.qpos[3:7]
            imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z = w, x, y, z
            gx, gy, gz = self.data.qvel[3:6]
            imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = gx, gy, gz
            self.imu_pub.publish(imu)

    def close(self) -> None:
        """Stop a language task's render thread; nothing else to stop."""
        if isinstance(self.task, _LanguageTask):
            self.task.close()

    def base_frame_pose(self, position: np.ndarray) -> PoseStamped:
        """PoseStamped of ``position`` ``[3]`` (already in the base frame), stamped now, identity orientation."""
        msg = PoseStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.p["base_frame"]
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in position)
        msg.pose.orientation.w = 1.0
        return msg

    def take_task_reset(self) -> None:
        """Reset the task's env and copy its state (qpos, qvel, ctrl) into this node's physics."""
        self.task_env.reset()
        _, data = self.task_env.mujoco_view(0)
        self.data.qpos[:], self.data.qvel[:], self.data.ctrl[:] = data.qpos, data.qvel, data.ctrl
        mujoco.mj_forward(self.model, self.data)

    def site_pos(self, role: str) -> np.ndarray:
        """``[3]`` world position of the site playing ``role``."""
        return self.data.site(site_name(self.robot, role)).xpos.copy()


def close_reach_episode(task: _ReachTask | _LanguageTask, sim_time: float) -> None:
    """End ``task``'s running episode once it has lasted ``episode_s``: publish ``sim/episode`` = [index, success,
    gripper-to-target distance m] (success: within ``success_radius``) and set ``index`` to -1 (none running)."""
    if task.index >= 0 and sim_time - task.episode_start >= task.episode_s:
        distance = float(np.linalg.norm(task.node.site_pos("end_effector") - task.target))
        success = float(distance < task.success_radius)
        task.episode_pub.publish(Float64MultiArray(data=[float(task.index), success, distance]))
        task.index = -1


def close_scored_episode(task: _LiftTask | _LanguageTask, sim_time: float) -> None:
    """End ``task``'s running episode on the task's own success, scored on the node's state this control period
    (``TaskEnv.score_state``), or once it has lasted ``episode_s``: publish ``sim/episode`` = [index, success,
    gripper-to-cube distance m] (the named cube for pick) and set ``index`` to -1 (none running)."""
    if task.index < 0:
        return
    data = task.node.data
    success = bool(task.env.score_state(data.qpos[None], data.qvel[None])[0])
    if success or sim_time - task.episode_start >= task.episode_s:
        distance = float(np.linalg.norm(task.env.term_value("gripper_to_cube")[0].numpy()))
        task.episode_pub.publish(Float64MultiArray(data=[float(task.index), float(success), distance]))
        task.index = -1


class _ReachTask:
    """Reach episodes on the simulated arm: targets out, success reports out."""

    def __init__(self, node: SimRobotNode) -> None:
        self.node = node
        self.target_pub = node.create_publisher(PoseStamped, node.p["target_topic"], 10)
        self.episode_pub = node.create_publisher(Float64MultiArray, "sim/episode", 10)
        self.index, self.episodes, self.episode_start, self.last_target_pub = -1, 0, 0.0, -1.0
        self.target = np.zeros(3)
        self.success_radius = node.p["success_radius"]
        env = node.task_env
        self.episode_s = node.p["episode_s"] or env.cfg.episode_s
        if len(node.target_joint_pos) == len(node.names):
            self.table = self._fk(np.asarray(node.target_joint_pos))[None]
        else:  # the training task's own target table: same distribution as in training
            if not env.has_target:
                raise ValueError(f"task {node.p['task']!r} has no target table; use a reach task or target_joint_pos")
            self.table = env.target_distribution().cpu().numpy().astype(np.float64)
            self.success_radius = float(env.cfg.params.get("success_radius", self.success_radius))

    def _fk(self, q: np.ndarray) -> np.ndarray:
        data = mujoco.MjData(self.node.model)
        data.qpos[self.node.qadr] = q
        mujoco.mj_kinematics(self.node.model, data)
        return data.site(site_name(self.node.robot, "end_effector")).xpos.copy()

    def update(self, sim_time: float) -> None:
        """Close the episode when it is over, start the next, and republish the target."""
        close_reach_episode(self, sim_time)
        if self.index < 0:
            self.index, self.episodes = self.episodes, self.episodes + 1
            self.episode_start = sim_time
            self.target = self.table[self.node.rng.integers(len(self.table))]
            self.last_target_pub = -1.0
        if sim_time - self.last_target_pub < 0.05:  # targets at 20 Hz and at every new episode
            return
        self.last_target_pub = sim_time
        self.target_pub.publish(self.node.base_frame_pose(self.target - self.node.site_pos("base")))


class _LanguageTask:
    """Language episodes in the task's scene (reach the named target, or lift the named cube): the task's reset, its
    instruction and camera images out, success scored as the task scores it.

    Images are rendered and published by a thread of their own (it owns the GL context; MuJoCo releases the GIL
    while rendering), from a copy of the state taken each control period: physics and joint states keep their
    time grid while a frame renders, and when rendering is slower than the control rate the newest state wins.
    """

    def __init__(self, node: SimRobotNode) -> None:
        self.node, self.env = node, node.task_env
        p = node.p
        self.cameras = tuple(c.strip() for c in p["cameras"].split(",") if c.strip())
        known = [node.model.camera(i).name for i in range(node.model.ncam)]
        if any(c not in known for c in self.cameras):
            raise ValueError(f"parameter 'cameras' = {p['cameras']!r}: task {p['task']!r} has cameras {known}")
        self.image_pubs = {c: node.create_publisher(Image, f"camera/{c}/image_raw", 1) for c in self.cameras}
        self.instruction_pub = node.create_publisher(String, p["instruction_topic"], 1)
        self.episode_pub = node.create_publisher(Float64MultiArray, "sim/episode", 10)
        self.episode_s = p["episode_s"] or self.env.cfg.episode_s
        self.success_radius = float(self.env.cfg.params.get("success_radius", 0.0))  # reach's
        self.index, self.episodes, self.episode_start, self.next_step, self.next_text = -1, 0, 0.0, 0.0, 0.0
        self.instruction, self.target = "", np.zeros(3)
        self.snapshot: tuple | None = None  # (stamp, qpos, mocap_pos, mocap_quat) for the render thread
        self.wake, self.stop = threading.Condition(), threading.Event()
        self.thread: threading.Thread | None = None
        if self.cameras:
            started: list[BaseException | None] = []
            self.thread = threading.Thread(target=self._render_loop, args=(p["image_size"], started), daemon=True)
            self.thread.start()
            with self.wake:
                self.wake.wait_for(lambda: started, timeout=60.0)
            if not started or started[0] is not None:
                raise ValueError(f"cannot render cameras {list(self.cameras)}: {started[0] if started else 'timeout'}")

    def _render_loop(self, size: int, started: list) -> None:
        """Render thread: open the renderer here (its GL context is current in this thread), then render and
        publish every new snapshot."""
        from sim.render import CameraGroup, GLUnavailableError  # GL only for a language task with cameras

        try:
            group = CameraGroup(self.node.model, self.cameras, size, size)
        except GLUnavailableError as exc:  # handed to __init__, which refuses to start
            started.append(exc)
            with self.wake:
                self.wake.notify_all()
            return
        started.append(None)
        with self.wake:
            self.wake.notify_all()
        messages = {c: Image() for c in self.cameras}
        try:
            while not self.stop.is_set():
                with self.wake:
                    self.wake.wait_for(lambda: self.snapshot is not None or self.stop.is_set(), timeout=0.5)
                    snapshot, self.snapshot = self.snapshot, None
                if snapshot is None:
                    continue
                stamp, qpos, mocap_pos, mocap_quat = snapshot
                frames = group.render(qpos[None], mocap_pos[None], mocap_quat[None])
                for camera, pub in self.image_pubs.items():
                    msg = image_message(frames[camera][0], messages[camera])
                    msg.header.stamp, msg.header.frame_id = stamp, camera
                    pub.publish(msg)
        finally:
            group.close()

    def close(self) -> None:
        """Stop the render thread (before the node is destroyed)."""
        self.stop.set()
        with self.wake:
            self.wake.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=5.0)

    def _start_episode(self, sim_time: float) -> None:
        """Arm, targets and instruction from the task's reset (copied into the node's data)."""
        self.env.reset()
        _, data = self.env.mujoco_view(0)
        node = self.node
        node.data.qpos[:], node.data.qvel[:], node.data.ctrl[:] = data.qpos, data.qvel, data.ctrl
        node.data.mocap_pos[:], node.data.mocap_quat[:] = data.mocap_pos, data.mocap_quat
        mujoco.mj_forward(node.model, node.data)
        self.instruction = self.env.instructions()[0]
        if self.env.has_target:
            self.target = self.env.target[0].cpu().numpy().astype(np.float64)
        self.index, self.episodes, self.episode_start, self.next_text = self.episodes, self.episodes + 1, sim_time, 0.0

    def update(self, sim_time: float) -> None:
        """Once per control period: close/start episodes, publish the instruction (every 0.5 s), hand the state to
        the render thread."""
        if sim_time < self.next_step:
            return
        self.next_step = max(self.next_step + self.env.dt, sim_time)
        if self.env.has_target:
            close_reach_episode(self, sim_time)
        else:
            close_scored_episode(self, sim_time)
        if self.index < 0:
            self._start_episode(sim_time)
        if sim_time >= self.next_text:
            self.next_text = sim_time + 0.5
            self.instruction_pub.publish(String(data=self.instruction))
        if self.thread is not None:
            data = self.node.data
            with self.wake:
                self.snapshot = (self.node.get_clock().now().to_msg(), data.qpos.copy(), data.mocap_pos.copy(),
                                 data.mocap_quat.copy())
                self.wake.notify_all()


class _LiftTask:
    """Lift episodes in the task's scene: arm and cube reset from the task, cube pose out, task success scored."""

    def __init__(self, node: SimRobotNode) -> None:
        self.node, self.env = node, node.task_env
        self.object_pub = node.create_publisher(PoseStamped, node.p["object_topic"], 10)
        self.episode_pub = node.create_publisher(Float64MultiArray, "sim/episode", 10)
        self.episode_s = node.p["episode_s"] or self.env.cfg.episode_s
        self.index, self.episodes, self.episode_start, self.next_step = -1, 0, 0.0, 0.0

    def _start_episode(self, sim_time: float) -> None:
        """Arm and cube from the task's reset distribution (a reset of the task's env, copied into the node)."""
        self.node.take_task_reset()
        self.index, self.episodes, self.episode_start = self.episodes, self.episodes + 1, sim_time

    def update(self, sim_time: float) -> None:
        """Once per control period: score the state, close/start episodes, publish the cube position."""
        if sim_time < self.next_step:
            return
        self.next_step = max(self.next_step + self.env.dt, sim_time)
        close_scored_episode(self, sim_time)
        if self.index < 0:
            self._start_episode(sim_time)
        self.object_pub.publish(self.node.base_frame_pose(self.env.term_value("cube_pos")[0].numpy()))


class _LocomotionTask:
    """Locomotion episodes: the task's reset and pushes, its velocity command out, falls scored."""

    def __init__(self, node: SimRobotNode) -> None:
        self.node, self.env = node, node.task_env
        if not node.floating or not self.env.cfg.terminations:
            raise ValueError(f"task {node.p['task']!r} is no locomotion task: it needs a floating base and "
                             "terminations (falls)")
        self.command_pub = node.create_publisher(Twist, node.p["velocity_command_topic"], 10)
        self.episode_pub = node.create_publisher(Float64MultiArray, "sim/episode", 10)
        self.episode_s = node.p["episode_s"] or self.env.cfg.episode_s
        rand = self.env.cfg.randomization
        self.push_interval = rand.push_interval_s if rand is not None else None
        self.push_velocity = rand.push_velocity if rand is not None else 0.0
        if self.push_interval:  # the base's world-frame x, y velocity, as the training env pushes it
            self.push_dofs = base_planar_dofs(node.model, node.robot.model.base_body)
        self.index, self.episodes, self.episode_start, self.next_step, self.next_push = -1, 0, 0.0, 0.0, math.inf
        self.command = Twist()

    def _start_episode(self, sim_time: float) -> None:
        """The task's reset (joints, base, command) copied into the node; the first push timer drawn."""
        self.node.take_task_reset()
        vx, vy, wz = (float(v) for v in self.env.term_value("velocity_command")[0])
        self.command.linear.x, self.command.linear.y, self.command.angular.z = vx, vy, wz
        self.index, self.episodes, self.episode_start = self.episodes, self.episodes + 1, sim_time
        self.next_push = sim_time + self._push_wait()

    def _push_wait(self) -> float:
        return self.node.rng.uniform(*self.push_interval) if self.push_interval else math.inf

    def update(self, sim_time: float) -> None:
        """Once per control period: score a fall, close/start episodes, push, publish the command."""
        if sim_time < self.next_step:
            return
        self.next_step = max(self.next_step + self.env.dt, sim_time)
        data = self.node.data
        if self.index < 0:
            self._start_episode(sim_time)
        else:
            fell = bool(self.env.terminated_state(data.qpos[None], data.qvel[None])[0])
            length = sim_time - self.episode_start
            if fell or length >= self.episode_s:
                self.episode_pub.publish(Float64MultiArray(data=[float(self.index), float(not fell), length]))
                self._start_episode(sim_time)
            elif sim_time >= self.next_push:
                data.qvel[self.push_dofs] += self.node.rng.uniform(-self.push_velocity, self.push_velocity, 2)
                self.next_push = sim_time + self._push_wait()
        self.command_pub.publish(self.command)


def _task_kind(env) -> type:
    """The episode player of ``env``'s task: language (reach or pick), reach, lift (a cube) or locomotion."""
    if env.has_instructions:
        return _LanguageTask
    if env.has_target:
        return _ReachTask
    if "cube_pos" in [name for name, _, _ in env.observation_layout["policy"]]:
        return _LiftTask
    return _LocomotionTask


def main(args: list[str] | None = None) -> int:
    """Console entry point ``sim_robot_node``."""
    node = spin.run_node(args, "sim_robot", lambda _stop: SimRobotNode(), (ValueError,), finish=SimRobotNode.close)
    return 2 if node is None else 0


if __name__ == "__main__":
    sys.exit(main())
