"""``robot-rl deploy check``: is this artifact safe to run on this robot? (numpy + onnxruntime)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.deploy.artifact import load_meta
from robot_rl.deploy.observation import RobotState, build_observation
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.deploy.validate import RobotSpec
from robot_rl.deploy.vla_runtime import VLARuntime

TERM_TOPICS = {
    "base_ang_vel": "imu",
    "projected_gravity": "imu",
    "velocity_command": "velocity_command",
    "target_pos": "target",
    "cube_pos": "object",
}
"""Observation terms that need a ROS input beyond JointState, and the robot.yaml ``ros`` key."""


@dataclass
class CheckReport:
    """Human-readable lines; ``errors`` count the findings that must stop a deployment."""

    lines: list[str] = field(default_factory=list)
    errors: int = 0

    def add(self, level: str, text: str) -> None:
        """Add ``OK``/``WARN``/``ERROR`` line."""
        self.lines.append(f"{level:5s} {text}")
        self.errors += level == "ERROR"


def check_artifact(artifact_dir: Path, robot: dict[str, Any], runs: int = 200) -> CheckReport:
    """Check ``artifact_dir`` against a robot dict (``RobotConfig.as_dict()``).

    Raises:
        ArtifactError: the artifact is refused by :func:`robot_rl.deploy.validate.load_policy` (the policy
            node refuses it too, with the same message): checksums, policy.yaml values, ONNX I/O, joints,
            default pose.
    """
    joints = robot["joints"]
    spec, report = RobotSpec.from_robot(robot), CheckReport()
    default = np.array([j["default"] for j in joints])
    if load_meta(artifact_dir).vla is None:
        runtime = PolicyRuntime(artifact_dir, robot=spec)
        meta = runtime.meta
        report.add("OK", f"{artifact_dir}: {meta.task or 'task ?'} policy, manifest sha256 verified, ONNX I/O "
                         f"[B, {meta.observation_dim}] -> [B, {meta.chunk_length * meta.action_dim}], "
                         f"{meta.action_dim} joints in the robot's order, default pose = robot.yaml's, obs "
                         f"{meta.observation_dim} = "
                         + " + ".join(f"{t.name}[{t.size}]x{t.scale:g}" for t in meta.observation))
        state = RobotState(joint_pos=default.copy(), joint_vel=np.zeros(len(joints)),
                           imu_quat_wxyz=np.array([1.0, 0, 0, 0]), imu_gyro=np.zeros(3),
                           velocity_command=np.zeros(3), target_pos=np.zeros(3), cube_pos=np.zeros(3))
        obs = build_observation(meta, state, np.zeros(meta.action_dim))
        infer = partial(runtime.infer, obs)
    else:
        vla_runtime = VLARuntime(artifact_dir, robot=spec)
        meta, v = vla_runtime.meta, vla_runtime.vla
        report.add("OK", f"{artifact_dir}: {meta.task or 'task ?'} VLA policy, manifest sha256 verified (tokenizer "
                         f"included), ONNX I/O {len(v.cameras)} camera(s) {v.cameras} {v.height}x{v.width} rgb8 + "
                         f"instruction ({len(v.instructions)} trained, {v.max_text_len} tokens) + joint positions "
                         f"-> [B, {meta.chunk_length * meta.action_dim}], {meta.action_dim} joints in the robot's "
                         f"order, default pose = robot.yaml's; topics {v.image_topics} and {v.instruction_topic!r}")
        images = {c: np.zeros((3, v.height, v.width), dtype=np.uint8) for c in v.cameras}
        infer = partial(vla_runtime.infer, images, v.instructions[0], default)
    if meta.robot != robot["name"]:
        report.add("WARN", f"artifact robot {meta.robot!r} != {robot['name']!r} (joints match)")
    control = robot["control"]
    if not np.allclose(meta.action.scale, control["action_scale"]):
        report.add("WARN", f"action scale {meta.action.scale} != robot.yaml {control['action_scale']} "
                           f"(fine if the task overrides it; the artifact's scale is what runs)")
    if abs(meta.control_hz - control["policy_hz"]) > 1e-9:
        report.add("WARN", f"control rate {meta.control_hz:g} Hz != robot.yaml policy_hz {control['policy_hz']:g} Hz")
    ros = robot.get("ros", {})
    for term in meta.observation:
        key = TERM_TOPICS.get(term.name)
        if key and key not in ros:
            report.add("ERROR", f"observation {term.name!r} needs ros.{key} in robot.yaml, which is missing")
    times = []
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        targets = infer()
        times.append(1e3 * (time.perf_counter() - t0))
    if not np.all(np.isfinite(targets)):
        report.add("ERROR", f"the policy returns non-finite targets at the default pose: {targets}")
    lower, upper = np.array([j["lower"] for j in joints]), np.array([j["upper"] for j in joints])
    outside = int(np.sum((targets < lower) | (targets > upper)))
    report.add("WARN" if outside else "OK", f"targets at the default pose (VLA: black images, the first "
                                            f"instruction): {outside} of {targets.size} outside "
                                            f"the joint limits (the safety layer clamps them)")
    report.add("OK", f"onnxruntime inference p50 {np.percentile(times, 50):.3f} ms, "
                     f"p99 {np.percentile(times, 99):.3f} ms over {len(times)} runs (1 thread)")
    return report
