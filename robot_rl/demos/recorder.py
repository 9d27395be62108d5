"""Roll out a scripted expert or a policy in a batched sim env and record finished episodes.

Every env's frames are buffered until its episode ends (termination or time limit), then
written as one episode; an episode is committed to disk before the next starts, so stopping
the recorder (Ctrl-C, crash, SIGKILL) keeps every episode already saved. ``resume=True`` continues
such a dataset (after trimming a half-committed episode) until it holds the episodes asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.data.lerobot import Feature, LeRobotWriter, meta
from robot_rl.data.lerobot.recovery import only_crash_leftovers
from robot_rl.demos.sim_io import (
    CAMERA_KEY,
    SIDECAR,
    actuator_targets,
    capture,
    dataset_features,
    read_sidecar,
    write_sidecar,
)
from robot_rl.errors import InputError

IMAGES_PREFIX = "observation.images."
"""LeRobot's prefix of camera features: a task's camera group ``camera_<name>`` records as ``<prefix><name>``."""

Policy = Callable[[object, dict[str, torch.Tensor]], torch.Tensor]
"""``policy(env, obs) -> action [num_envs, action_dim]``."""


def expert_policy(env, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The task's scripted expert (``env.expert_action()``, declared by the task in sim) as a :data:`Policy`."""
    return env.expert_action()


def observation_policy(policy: Callable[[np.ndarray], np.ndarray]) -> Policy:
    """A :data:`Policy` from ``policy(obs [N, D] float32) -> action [N, A]`` of the policy observation
    (e.g. :func:`robot_rl.deploy.policies.artifact_policy`)."""
    return lambda env, obs: torch.as_tensor(policy(obs["policy"].cpu().numpy()), device=env.device)


@dataclass
class RecordSummary:
    """What a recording produced."""

    root: Path
    episodes: int
    frames: int
    successes: int
    env_steps: int
    seconds: float
    kept: int = 0

    def __str__(self) -> str:
        """One paragraph for the command line."""
        return (
            f"recorded {self.episodes} episodes ({self.frames} frames) to {self.root}; "
            f"success {self.successes}/{self.episodes}; {self.env_steps} env steps in "
            f"{self.seconds:.1f} s ({self.env_steps / max(self.seconds, 1e-9):.0f} env-steps/s)"
            + (f"; kept the {self.kept} complete episodes recorded before" if self.kept else "")
        )


def open_writer(root: Path, fps: int, features: dict[str, dict[str, Any]], robot_type: str, sidecar: dict[str, Any],
                overwrite: bool, resume: bool) -> LeRobotWriter:
    """A writer for a new dataset at ``root``, or, with ``resume``, one continuing the dataset there.

    Resuming trims what a crash left half-committed and refuses a dataset of other features, fps or sim
    task. A folder holding only crash leftovers (a recorder killed before its first ``meta/info.json``)
    is started afresh: it holds no episode. Any other non-empty folder needs ``resume`` or ``overwrite``.
    """
    if root.exists() and not root.is_dir():
        raise InputError("is not a folder", file=root, fix="pass --out a folder path")
    if resume and (root / meta.INFO_PATH).is_file():
        info = meta.load_info(root)  # everything is checked before the repair touches a file
        want = {k: Feature(v["dtype"], tuple(v["shape"]), v.get("names")) for k, v in features.items()}
        have = {k: f for k, f in info.features.items() if k not in meta.DEFAULT_FEATURES}
        if have != want or info.fps != fps:
            diff = sorted(k for k in have.keys() | want.keys() if have.get(k) != want.get(k))
            raise InputError(f"records other features or fps than this recording (differing: {diff or 'fps'}; "
                             f"fps {info.fps} vs {fps})", file=root / meta.INFO_PATH,
                             fix="resume with the same --task, --camera and --override, or record to a new --out")
        old = read_sidecar(root)
        if old and (old.get("sim_task"), old.get("overrides")) != (sidecar["sim_task"], sidecar["overrides"]):
            raise InputError(f"was recorded from task {old.get('sim_task')!r} with overrides {old.get('overrides')}",
                             file=root / SIDECAR, key="sim_task",
                             fix="resume with the same --task and --override, or record to a new --out")
        return LeRobotWriter.resume(root)
    if root.is_dir() and any(root.iterdir()) and not overwrite:
        if not only_crash_leftovers(root):
            raise InputError("exists and is not empty", file=root,
                             fix="--resume continues the dataset there (a half-written episode is dropped, every "
                                 "complete one kept), --overwrite replaces it, or choose another --out")
        overwrite = True  # nothing but temporary files of a recorder killed before its first commit
    return LeRobotWriter.create(root, fps=fps, features=features, robot_type=robot_type, overwrite=overwrite)


TASK_FRONT_CAMERA = "front"
"""The world camera a task may define itself (the language tasks): ``--camera HxW`` records that one there."""


def _task_camera_overrides(task: str, camera: tuple[int, int]) -> dict[str, Any]:
    """The task overrides that render ``task``'s own front camera at ``camera`` ``(height, width)`` (square only)."""
    height, width = camera
    if height != width:
        raise ValueError(f"task {task!r} renders its own {TASK_FRONT_CAMERA!r} camera in square images: --camera "
                         f"{height}x{width} is not square; use --camera {height}x{height}, or --override "
                         f"'cameras=[\"front\",\"wrist\"]' --override image_size={height}")
    return {"cameras": [TASK_FRONT_CAMERA], "image_size": height}


def record(
    task: str,
    policy: Policy,
    root: Path,
    num_episodes: int,
    task_text: str | None,
    num_envs: int = 1,
    seed: int = 0,
    camera: tuple[int, int] | None = None,
    only_success: bool = False,
    source: str = "expert",
    overwrite: bool = False,
    max_env_steps: int | None = None,
    overrides: dict[str, Any] | None = None,
    resume: bool = False,
) -> RecordSummary:
    """Record ``num_episodes`` episodes of ``task`` driven by ``policy`` into a new dataset at ``root``.

    Args:
        task: sim task name (``sim.make_env``).
        policy: ``policy(env, obs) -> action``; :func:`expert_policy` records the task's scripted expert.
        root: dataset folder to create.
        num_episodes: episodes to save.
        task_text: the natural-language task stored with every frame; None: each episode's instruction for
            a task with instructions (``env.instructions()``), else the task name with spaces.
        num_envs: parallel envs (rendering a camera costs one render per env per step).
        seed: env seed.
        camera: ``(height, width)`` of a rendered front camera, or None. A task that defines its own ``front``
            camera (the language tasks) records that one, as ``overrides={"cameras": ["front"], "image_size":
            height}`` would (square sizes only), so that training sees the view its evaluation renders. A task
            built with camera groups (``overrides={"cameras": [...]}``) stores each as
            ``observation.images.<camera>``.
        only_success: save only episodes in which the task succeeded at some step.
        source: recorded in ``meta/robot_rl.json`` (``expert:<task>`` or ``policy:<path>``).
        overwrite: replace an existing dataset at ``root``.
        max_env_steps: stop after this many env steps (default: 20 episode lengths per episode asked).
        overrides: task config overrides for ``sim.make_env`` (e.g. ``{"episode_s": 2.0}``), stored
            in ``meta/robot_rl.json`` so replay rebuilds the same env.
        resume: continue the dataset at ``root`` (see :func:`open_writer`) until it holds ``num_episodes``;
            the env is seeded ``seed + episodes kept`` so the new episodes differ from the kept ones.
    """
    import sim
    from sim.render import SimCamera

    if num_episodes < 1 or num_envs < 1:
        raise ValueError(f"num_episodes and num_envs must be >= 1, got {num_episodes}, {num_envs}")
    overrides = dict(overrides or {})
    root = Path(root)
    kept = 0
    if resume and (root / meta.INFO_PATH).is_file():
        kept = meta.load_info(root).total_episodes
        if kept >= num_episodes:
            return RecordSummary(root, 0, 0, 0, 0, 0.0, kept)
        seed += kept
    env = sim.make_env(task, num_envs=num_envs, seed=seed, **overrides)
    if camera is not None and "cameras" not in overrides and TASK_FRONT_CAMERA in env.world_cameras():
        env.close()  # the task renders its own front camera: record that one, as its training and evaluation will
        overrides.update(_task_camera_overrides(task, camera))
        camera = None
        env = sim.make_env(task, num_envs=num_envs, seed=seed, **overrides)
    if policy is expert_policy and not env.has_expert:
        env.close()
        raise ValueError(f"task {task!r} has no scripted expert; record a trained policy instead "
                         "(robot-rl record --policy <artifact dir>)")
    if task_text is not None and env.has_instructions:
        env.close()
        raise ValueError(f"task {task!r} draws an instruction per episode and stores it; drop --instruction")
    fps = round(1.0 / env.dt)
    if abs(fps * env.dt - 1.0) > 1e-6:
        raise ValueError(f"task {task!r} runs at {1 / env.dt:.4f} Hz; LeRobot datasets need an integer fps")
    cam = SimCamera(env.model, *camera) if camera else None
    limit = max_env_steps or 20 * num_episodes * env.max_episode_steps
    buffers: list[list[dict]] = [[] for _ in range(num_envs)]
    saved = frames = successes = steps = 0
    start = time.perf_counter()
    obs = env.reset(seed=seed)
    sidecar = {"sim_task": task, "overrides": {k: v for k, v in overrides.items() if k != "randomization"}}
    try:
        features = dataset_features(env, camera)
        groups = {f"{IMAGES_PREFIX}{name[len('camera_'):]}": name for name in env.image_shapes}
        if camera is not None and CAMERA_KEY in groups:
            raise ValueError(f"--camera and the task's camera group {groups[CAMERA_KEY]!r} both make {CAMERA_KEY}; "
                             "drop --camera")
        for key, name in groups.items():
            _, height, width = env.image_shapes[name]
            features[key] = {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]}
        default_text = task_text or task.replace("_", " ")
        with open_writer(root, fps, features, env.robot.name, sidecar, overwrite, resume) as writer:
            kept = writer.info.total_episodes
            if not read_sidecar(root):
                write_sidecar(root, env, task, source, seed, overrides)
            while saved < num_episodes - kept:
                if steps >= limit:
                    raise RuntimeError(
                        f"saved only {saved}/{num_episodes - kept} episodes in {steps} env steps"
                        + (" (--only-success: the policy rarely succeeds)" if only_success else "")
                    )
                state = capture(env)
                images = [cam.render_env(env, i) for i in range(num_envs)] if cam else None
                texts = env.instructions() if env.has_instructions else [default_text] * num_envs
                views = {key: obs[name].permute(0, 2, 3, 1).cpu().numpy() for key, name in groups.items()}
                action = torch.clamp(policy(env, obs), env.action_low, env.action_high)
                targets = actuator_targets(env, action).cpu().numpy()
                joint_pos, joint_vel = env.state.joint_pos.cpu().numpy(), env.state.joint_vel.cpu().numpy()
                policy_obs = obs["policy"].cpu().numpy()
                step = env.step(action)
                steps += num_envs
                done = (step.terminated | step.truncated).cpu().numpy()
                terminated = step.terminated.cpu().numpy()
                next_obs = step.info["final_obs"]["policy"].cpu().numpy()  # pre-reset where done
                success = step.info["success"].cpu().numpy()
                reward = step.reward.cpu().numpy()
                act = action.cpu().numpy()
                for i in range(num_envs):
                    frame = {
                        "observation.state": joint_pos[i],
                        "observation.velocity": joint_vel[i],
                        "observation.policy": policy_obs[i],
                        "action": targets[i],
                        "action.policy": act[i],
                        "next.reward": np.float32(reward[i]),
                        "next.done": bool(done[i]),
                        "next.terminated": bool(terminated[i]),
                        "next.observation.policy": next_obs[i],
                        "next.success": bool(success[i]),
                        **{k: v[i] for k, v in state.items()},
                        **{k: v[i] for k, v in views.items()},
                        "task": texts[i],
                    }
                    if images is not None:
                        frame[CAMERA_KEY] = images[i]
                    buffers[i].append(frame)
                    if not done[i]:
                        continue
                    episode, buffers[i] = buffers[i], []
                    succeeded = any(f["next.success"] for f in episode)
                    if saved >= num_episodes - kept or (only_success and not succeeded):
                        continue
                    for f in episode:
                        writer.add_frame(f)
                    writer.save_episode()
                    saved, frames, successes = saved + 1, frames + len(episode), successes + int(succeeded)
                obs = step.obs
    finally:
        if cam:
            cam.close()
        env.close()
    return RecordSummary(root, saved, frames, successes, steps, time.perf_counter() - start, kept)
