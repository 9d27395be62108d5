"""Evaluate an exported policy artifact (ONNX Runtime) on its task in simulation.

The artifact goes through the deploy validator (:func:`robot_rl.deploy.validate.load_policy`), so
``robot-rl eval`` refuses what ``deploy check`` and the policy node refuse (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.artifact import META_FILE, ArtifactError, load_meta
from robot_rl.deploy.chunking import ChunkExecutor
from robot_rl.deploy.runtime import PolicyRuntime, chunk_executor
from robot_rl.deploy.validate import RobotSpec
from robot_rl.errors import InputError
from robot_rl.train.evaluation import EnvPlayer, evaluate


class ArtifactPolicy:
    """Batched ONNX policy as the env sees it: raw obs ``[N, D]`` -> raw action ``[N, A]``.

    The artifact outputs chunks of joint targets ``offset + scale * action`` ``[N, H*A]``; the env wants
    ``action``, so targets are mapped back with :func:`robot_rl.deploy.actions.to_raw` (``(target - offset) / scale``
    clipped to the action spec's range, as the policy node maps them) and played one per step by the
    deploy :class:`~robot_rl.deploy.chunking.ChunkExecutor` with policy.yaml's ``chunk_execution`` (as the
    policy node plays them), or open loop every ``execute_len`` steps when given (1: re-planned every step);
    :func:`~robot_rl.train.evaluation.evaluate` calls :meth:`reset` on done envs
    (``on_done``).
    """

    def __init__(self, runtime: PolicyRuntime, execute_len: int | None = None) -> None:
        self.runtime, self.execute_len = runtime, execute_len
        meta = runtime.meta
        self.H, self.A = meta.chunk_length, meta.action_dim
        self.executor: ChunkExecutor | None = None
        self.queries = 0
        """Chunks inferred so far (rows)."""

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """``[N, D]`` -> ``[N, A]`` on ``obs``'s device (the executor is made for ``N`` on the first call)."""
        if self.executor is None:
            self.executor = chunk_executor(self.runtime.meta, obs.shape[0], self.execute_len)
        rows = self.executor.needs_query()
        chunks = np.zeros((0, self.H, self.A), dtype=np.float32)
        if rows.any():
            x = obs.detach().cpu().numpy().astype(np.float32)[rows]
            targets = self.runtime.session.run(None, {"obs": x})[0].reshape(-1, self.H, self.A)
            chunks = to_raw(self.runtime.meta.action, targets).astype(np.float32)
            self.queries += len(x)
        action = self.executor.step(chunks).astype(np.float32)
        return torch.from_numpy(action).to(obs.device)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done.cpu().numpy())


class VLAArtifactPlayer(EnvPlayer):
    """A VLA artifact (:class:`~robot_rl.deploy.vla_runtime.VLARuntime`, ONNX Runtime) played in its language task
    as the policy node plays it: per query, env ``i``'s rendered cameras (uint8 ``[3, H, W]``), its instruction and
    joint positions go through ``VLARuntime.infer`` (one robot per call, zero noise), the joint targets ``[H, A]``
    map back to env actions (:func:`robot_rl.deploy.actions.to_raw`, as the policy node's action spec) and the deploy
    :class:`~robot_rl.deploy.chunking.ChunkExecutor` plays them with policy.yaml's ``chunk_execution`` (or open
    loop every ``execute_len`` steps). ``instruction_shift`` != 0 tells it another target's instruction while the
    env scores the named one (``--wrong-instruction``).

    ``image_lag`` = ``L`` control steps: a query sees the camera images rendered ``L`` steps earlier beside the
    current joint positions, as a ROS 2 policy node sees a camera's latest frame (the simulated robot renders after it
    publishes the joint states; a real camera's frame arrives late too). An episode's first query sees its first
    frame (the node waits for the new scene's image), and a query fewer than ``L`` steps into an episode its oldest.
    Each step renders only the envs that query within ``L`` steps (``L`` = 1: one render per query, as without a
    lag)."""

    def __init__(self, runtime: Any, execute_len: int | None = None, instruction_shift: int = 0,
                 image_lag: int = 0) -> None:
        if image_lag < 0:
            raise ValueError(f"image_lag must be >= 0 control steps, got {image_lag}")
        self.runtime, self.execute_len, self.shift, self.lag = runtime, execute_len, instruction_shift, image_lag
        self.H, self.A = runtime.meta.chunk_length, runtime.meta.action_dim
        self.executor: ChunkExecutor | None = None
        self.frames: list[list[tuple[int, dict[str, np.ndarray]]]] = []  # per env: (step, images), oldest first
        self.t = 0

    def act(self, env: Any, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Action ``[N, A]`` for this step of ``env`` (a language task rendering the artifact's cameras)."""
        if self.executor is None:
            self.executor = chunk_executor(self.runtime.meta, env.num_envs, self.execute_len)
            self.frames = [[] for _ in range(env.num_envs)]
        rows = np.flatnonzero(self.executor.needs_query())
        chunks = np.zeros((len(rows), self.H, self.A))
        if len(rows):
            texts, state = env.instructions(self.shift), env.joint_positions().cpu().numpy()
            images = self._images(env, rows)
            for k, i in enumerate(rows):
                targets = self.runtime.infer(images[k], texts[i], state[i])
                chunks[k] = to_raw(self.runtime.meta.action, targets)
        action = self.executor.step(chunks.astype(np.float32)).astype(np.float32)
        if self.lag:
            self._remember(env)
        self.t += 1
        return torch.from_numpy(action).to(env.device)

    @staticmethod
    def _render(env: Any, rows: np.ndarray) -> list[dict[str, np.ndarray]]:
        """``{camera: uint8 [3, H, W]}`` of each env of ``rows``, rendered now (one render call for all)."""
        if not len(rows):
            return []
        images = {c: v.cpu().numpy() for c, v in env.camera_images(rows).items()}
        return [{c: v[k] for c, v in images.items()} for k in range(len(rows))]

    def _images(self, env: Any, rows: np.ndarray) -> list[dict[str, np.ndarray]]:
        """The images each of ``rows`` queries with: rendered now, or the remembered frame ``L`` steps old."""
        out: list[dict[str, np.ndarray] | None] = [self.frames[i][0][1] if self.frames[i] else None for i in rows]
        fresh = [k for k, images in enumerate(out) if images is None]
        for k, images in zip(fresh, self._render(env, rows[fresh]), strict=True):
            out[k] = images
        return out  # type: ignore[return-value]

    def _remember(self, env: Any) -> None:
        """Render (before this step's physics) the envs that query within ``L`` steps; forget the frames no query
        can use any more."""
        due = np.flatnonzero(self.executor.steps_to_query() <= self.lag)
        for i, images in zip(due, self._render(env, due), strict=True):
            self.frames[i].append((self.t, images))
        oldest = self.t + 1 - self.lag  # the next step's queries use frames from this step on
        for kept in self.frames:
            while len(kept) > 1 and kept[1][0] <= oldest:
                kept.pop(0)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans and remembered frames of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done.cpu().numpy())
            for i in np.flatnonzero(done.cpu().numpy()):
                self.frames[i] = []


def training_control(config: dict[str, Any]) -> dict[str, Any]:
    """The ``task.env.control`` the artifact's run trained with (its policy.yaml ``config``; ``{}`` if none): an
    action scale other than robot.yaml's changes what the policy's actions mean, and a training rate limit
    (``max_step_change``) is the robot the policy learned, so the artifact's task is rebuilt with them."""
    task = config.get("task") if isinstance(config, dict) else None
    env = task.get("env") if isinstance(task, dict) else None
    control = env.get("control") if isinstance(env, dict) else None
    return dict(control) if isinstance(control, dict) else {}


def evaluate_artifact(artifact: Path, episodes: int, num_envs: int, seed: int,
                      video: Path | None = None, task: str | None = None,
                      execute_len: int | None = None, instruction_shift: int = 0,
                      latency_s: float | None = None, image_lag: int = 0,
                      rate_limit: bool = False) -> dict[str, Any]:
    """Summary of ``episodes`` episodes of the artifact on ``task`` (default: the artifact's).

    The task is built with the run's ``task.env.control`` (:func:`training_control`) when it is the artifact's own.
    A VLA artifact (policy.yaml ``vla``) runs through :class:`VLAArtifactPlayer` on its task built with its
    cameras at its image size; ``instruction_shift`` != 0 (VLA only) adds a second evaluation on the same episode
    seeds told another target's instruction, under ``"wrong_instruction"``.

    ``execute_len``: play the chunks open loop, re-querying every ``execute_len`` steps (1: re-planned every
    step), instead of policy.yaml's ``chunk_execution``; InputError unless in ``[1, chunk_length]``.

    ``latency_s``: every command reaches the motors this many seconds late in every env (MuJoCo's actuator delay, at
    physics resolution; it replaces the task's own ``actuator_delay_s`` range), the latency a ROS 2 loop adds
    (``sim2sim --latency-ms`` plus the policy node's compute); the summary carries it as ``latency_ms``.

    ``image_lag``: VLA only, every query sees camera images this many control steps old (:class:`VLAArtifactPlayer`),
    the summary carries it as ``image_lag_steps``; InputError for another artifact.

    ``rate_limit``: every command moves each joint at most the robot's ``safety.max_step_change`` (robot.yaml) from
    the last one, as the policy node's safety layer does (it replaces a training limit); the summary carries it as
    ``max_step_change``.
    """
    import sim

    meta = load_meta(artifact)  # manifest and policy.yaml checked before an env is built
    task = task or meta.task
    if not task:
        raise ArtifactError("names no task", file=Path(artifact) / META_FILE, key="task", value="",
                            fix="pass --task")
    vla = meta.vla
    overrides = {} if vla is None else {"cameras": list(vla.cameras), "image_size": vla.height, "camera_obs": False}
    control = training_control(meta.config) if task == meta.task else {}
    if rate_limit:
        from sim.robots import load_robot

        control["max_step_change"] = load_robot(meta.robot).safety.max_step_change
    if control:
        overrides["control"] = control
    if latency_s is not None:
        overrides["randomization"] = {"actuator_delay_s": (latency_s, latency_s)}
    env = sim.make_env(task, num_envs=num_envs, seed=seed, **overrides)
    # the deploy validator, against the env's robot: joints, limits, default pose, ONNX I/O
    robot = RobotSpec.from_robot(env.robot.as_dict())
    if vla is None:
        runtime = PolicyRuntime(artifact, robot=robot)
    else:
        from robot_rl.deploy.vla_runtime import VLARuntime  # tokenizers: the [vla] extra, only for VLA artifacts

        runtime = VLARuntime(artifact, robot=robot)
    H = runtime.meta.chunk_length
    if execute_len is not None and not 1 <= execute_len <= H:
        raise InputError(f"must be in [1, {H}], the artifact's chunk length", key="--execute-len", value=execute_len,
                         fix=f"pass 1 (re-plan every step) .. {H} (play whole chunks)")
    if vla is None and image_lag:
        raise InputError("an image lag needs a VLA artifact (one with cameras)", key="--image-lag", value=image_lag,
                         fix="drop --image-lag for this artifact")
    if vla is None and instruction_shift:
        raise InputError("a wrong instruction needs a VLA artifact", key="--wrong-instruction",
                         fix="drop --wrong-instruction for this artifact")
    policy = (ArtifactPolicy(runtime, execute_len) if vla is None
              else VLAArtifactPlayer(runtime, execute_len, image_lag=image_lag))
    summary = evaluate(policy, env, episodes, seed, video, on_done=policy.reset).summary()
    if instruction_shift:
        wrong = VLAArtifactPlayer(runtime, execute_len, instruction_shift, image_lag)
        summary["wrong_instruction"] = evaluate(wrong, env, episodes, seed, on_done=wrong.reset).summary()
    if execute_len is not None:
        summary["execute_len"] = execute_len
    if latency_s is not None:
        summary["latency_ms"] = 1e3 * latency_s
    if image_lag:
        summary["image_lag_steps"] = image_lag
    if rate_limit:
        summary["max_step_change"] = control["max_step_change"]
    summary["task"] = task
    return summary
