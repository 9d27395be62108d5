"""What a sim demo stores, and how its state goes in and out of a :class:`sim.env.TaskEnv`.

Per frame (LeRobot feature names; J joints, D policy-observation size, nq/nv MuJoCo sizes):

- ``observation.state``    float32 ``[J]`` joint positions (rad), names ``<joint>.pos``
- ``observation.velocity`` float32 ``[J]`` joint velocities (rad/s), names ``<joint>.vel``
- ``observation.policy``   float32 ``[D]`` the policy observation the env returned (layout order)
- ``action``               float32 ``[J]`` actuator targets sent to the robot (rad for position
  control, N m for torque control), names ``<joint>.pos`` / ``<joint>.effort``
- ``action.policy``        float32 ``[J]`` the raw policy action in ``[-1, 1]``
- ``next.reward`` float32, ``next.done`` bool (terminated or time limit), ``next.terminated`` bool
  (a true end: no bootstrapping), ``next.success`` bool
- ``next.observation.policy`` float32 ``[D]`` the policy observation after the action (before the
  env's automatic reset on the last frame), so frames are complete RL transitions
- ``sim.qpos`` float64 ``[nq]``, ``sim.qvel`` float64 ``[nv]``, ``sim.target`` float32 ``[3]``
  (tasks with a target): the full sim state, so replay can restore an episode's first frame;
- ``sim.named_position`` float32 ``[3]`` (language tasks): the world position of the object the instruction names,
  every frame (``InstructedTask.named_position``; what a VLA's keypoint loss projects into the cameras);
- ``sim.<draw>`` for each draw of the task's domain randomisation fixed for the episode
  (:data:`sim.randomization.EPISODE_DRAWS`: ``sim.geom_friction`` float64 ``[ngeom]``, ``sim.body_mass``
  ``[nbody]``, ``sim.actuator_gain`` ``[nu]``, ``sim.actuator_bias`` ``[2 nu]``, ``sim.actuator_delay`` ``[nu]``,
  ``sim.action_delay`` int64 ``[1]``), so replay runs in the recorded physics. Per-step action noise is
  random at every step and cannot be stored.
- optionally ``observation.images.front`` video ``[H, W, 3]`` rendered from the sim.

``meta/robot_rl.json`` (ignored by LeRobot) names the sim task, so replay can rebuild the env.
State goes in and out through the env's public calls (``capture_state``/``restore_state``, ``get_target``/
``set_target``; docs/tasks.md).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.data.lerobot.meta import write_json_atomic
from robot_rl.errors import InputError
from sim.randomization import EPISODE_DRAWS

CAMERA_KEY = "observation.images.front"
SIDECAR = "meta/robot_rl.json"


def dataset_features(env, camera: tuple[int, int] | None = None) -> dict[str, dict[str, Any]]:
    """LeRobot features of a demo recorded in ``env``; ``camera`` is ``(height, width)`` or None."""
    joints = env.robot.joint_names
    torque = env.robot.control.action_type == "joint_torque"
    policy_names = [f"{term}[{i}]" for term, size, _ in env.observation_layout["policy"] for i in range(size)]
    features: dict[str, dict[str, Any]] = {
        "observation.state": {"dtype": "float32", "shape": [len(joints)], "names": [f"{j}.pos" for j in joints]},
        "observation.velocity": {"dtype": "float32", "shape": [len(joints)], "names": [f"{j}.vel" for j in joints]},
        "observation.policy": {"dtype": "float32", "shape": [len(policy_names)], "names": policy_names},
        "action": {
            "dtype": "float32",
            "shape": [len(joints)],
            "names": [f"{j}.effort" if torque else f"{j}.pos" for j in joints],
        },
        "action.policy": {"dtype": "float32", "shape": [env.action_dim], "names": [f"{j}.action" for j in joints]},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "next.terminated": {"dtype": "bool", "shape": [1], "names": None},
        "next.observation.policy": {"dtype": "float32", "shape": [len(policy_names)], "names": policy_names},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
        "sim.qpos": {"dtype": "float64", "shape": [env.model.nq], "names": None},
        "sim.qvel": {"dtype": "float64", "shape": [env.model.nv], "names": None},
    }
    if env.has_target:
        features["sim.target"] = {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]}
    if env.has_instructions:
        features["sim.named_position"] = {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]}
    draws = draw_columns(env.capture_state([0]).randomization)
    features.update({key: {"dtype": str(value.dtype), "shape": list(value.shape[1:]), "names": None}
                     for key, value in draws.items()})
    if camera is not None:
        features[CAMERA_KEY] = {
            "dtype": "video",
            "shape": [camera[0], camera[1], 3],
            "names": ["height", "width", "channels"],
        }
    return features


def actuator_targets(env, action: torch.Tensor) -> torch.Tensor:
    """``[N, J]`` what the actuators receive for policy ``action`` ``[N, J]`` (clamped PD targets or torques)."""
    return env.actuator_command(torch.clamp(action, env.action_low, env.action_high))


def draw_columns(draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{sim.<name>: [n, ...]}`` dataset columns of a snapshot's randomiser draws ``{name: [n, ...]}``."""
    return {f"sim.{name}": value for name, value in draws.items() if name in EPISODE_DRAWS}


def recorded_draws(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draws recorded in an episode's columns, first frame each, as ``{name: [1, ...]}`` (for :func:`restore`)."""
    return {name: np.asarray(data[f"sim.{name}"][:1]) for name in EPISODE_DRAWS if f"sim.{name}" in data}


def capture(env) -> dict[str, np.ndarray]:
    """Full sim state of every env as dataset columns: ``sim.qpos [N, nq]``, ``sim.qvel [N, nv]``,
    ``sim.target [N, 3]``, ``sim.named_position [N, 3]`` (language tasks) and the randomised
    physics (:func:`draw_columns`)."""
    snapshot = env.capture_state()
    out = {"sim.qpos": snapshot.physics["qpos"], "sim.qvel": snapshot.physics["qvel"]}
    if env.has_target:
        out["sim.target"] = env.get_target().cpu().numpy().astype(np.float32)
    if env.has_instructions:
        out["sim.named_position"] = env.named_position().cpu().numpy().astype(np.float32)
    out.update(draw_columns(snapshot.randomization))
    return out


def restore(env, qpos: np.ndarray, qvel: np.ndarray, target: np.ndarray | None = None,
            draws: dict[str, np.ndarray] | None = None) -> None:
    """Put env 0 of a freshly reset ``env`` in a recorded state: ``qpos [nq]``, ``qvel [nv]``, ``target [3]``
    and randomiser draws ``{name: [1, ...]}`` (:func:`recorded_draws`).

    The rest of the state (controls, actuator history, time) is the fresh reset's, as at recording.
    """
    if qpos.shape != (env.model.nq,) or qvel.shape != (env.model.nv,):
        raise ValueError(
            f"recorded state has qpos {qpos.shape}, qvel {qvel.shape}; this env's model needs "
            f"({env.model.nq},), ({env.model.nv},): the dataset was recorded in another task or model"
        )
    if target is not None and not env.has_target:
        raise ValueError("the dataset records a target but this task has none; pass the recording's --task")
    snapshot = env.capture_state([0])
    physics = {**snapshot.physics, "qpos": qpos[None], "qvel": qvel[None]}
    randomization = {**snapshot.randomization, **(draws or {})}
    env.restore_state(dataclasses.replace(snapshot, physics=physics, randomization=randomization), [0])
    if target is not None:
        env.set_target(torch.tensor(np.array(target)[None]), [0])  # a copy: the recorded row is read-only


def write_sidecar(root: Path, env, task: str, source: str, seed: int, overrides: dict[str, Any]) -> None:
    """``meta/robot_rl.json``: the sim task, its config overrides and randomisation, and the demos' source."""
    plain = {k: v for k, v in overrides.items() if k != "randomization"}
    write_json_atomic(
        root / SIDECAR,
        {
            "sim_task": task,
            "overrides": plain,
            "randomization": dataclasses.asdict(env.cfg.randomization),
            "source": source,
            "seed": seed,
        },
    )


def read_sidecar(root: Path) -> dict[str, Any]:
    """``meta/robot_rl.json`` (empty when the dataset was not recorded by robot_rl)."""
    path = root / SIDECAR
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"is not valid JSON ({err})", file=path, fix="restore it from a copy") from err
    if not isinstance(doc, dict):
        raise InputError(f"must hold a JSON object, got {type(doc).__name__}", file=path, fix="restore it from a copy")
    return doc
