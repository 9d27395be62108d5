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
    env scores the named one (``--wrong-instruction``)."""

    def __init__(self, runtime: Any, execute_len: int | None = None, instruction_shift: int = 0) -> None:
        self.runtime, self.execute_len, self.shift = runtime, execute_len, instruction_shift
        self.H, self.A = runtime.meta.chunk_length, runtime.meta.action_dim
        self.executor: ChunkExecutor | None = None

    def act(self, env: Any, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Action ``[N, A]`` for this step of ``env`` (a language task rendering the artifact's cameras)."""
        if self.executor is None:
            self.executor = chunk_executor(self.runtime.meta, env.num_envs, self.execute_len)
        rows = np.flatnonzero(self.executor.needs_query())
        chunks = np.zeros((len(rows), self.H, self.A))
        if len(rows):
            texts, state = env.instructions(self.shift), env.joint_positions().cpu().numpy()
            images = {c: v.cpu().numpy() for c, v in env.camera_images(rows).items()}
            for k, i in enumerate(rows):
                targets = self.runtime.infer({c: v[k] for c, v in images.items()}, texts[i], state[i])
                chunks[k] = to_raw(self.runtime.meta.action, targets)
        action = self.executor.step(chunks.astype(np.float32)).astype(np.float32)
        return torch.from_numpy(action).to(env.device)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done.cpu().numpy())


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
                      latency_s: float | None = None) -> dict[str, Any]:
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
    if vla is None and instruction_shift:
        raise InputError("a wrong instruction needs a VLA artifact", key="--wrong-instruction",
                         fix="drop --wrong-instruction for this artifact")
    policy = ArtifactPolicy(runtime, execute_len) if vla is None else VLAArtifactPlayer(runtime, execute_len)
    summary = evaluate(policy, env, episodes, seed, video, on_done=policy.reset).summary()
    if instruction_shift:
        wrong = VLAArtifactPlayer(runtime, execute_len, instruction_shift)
        summary["wrong_instruction"] = evaluate(wrong, env, episodes, seed, on_done=wrong.reset).summary()
    if execute_len is not None:
        summary["execute_len"] = execute_len
    if latency_s is not None:
        summary["latency_ms"] = 1e3 * latency_s
    summary["task"] = task
    return summary
