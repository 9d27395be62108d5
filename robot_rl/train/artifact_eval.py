"""Evaluate an exported policy artifact (ONNX Runtime) on its task in simulation.

The artifact goes through the deploy validator (:func:`robot_rl.deploy.validate.load_policy`), so
``robot-rl eval`` refuses what ``deploy check`` and the policy node refuse (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.deploy.artifact import META_FILE, ArtifactError, load_meta
from robot_rl.deploy.chunking import ChunkExecutor
from robot_rl.deploy.runtime import PolicyRuntime, chunk_executor
from robot_rl.deploy.validate import RobotSpec
from robot_rl.errors import InputError
from robot_rl.train.evaluation import evaluate


class ArtifactPolicy:
    """Batched ONNX policy as the env sees it: raw obs ``[N, D]`` -> raw action ``[N, A]``.

    The artifact outputs chunks of joint targets ``offset + scale * action`` ``[N, H*A]``; the env wants
    ``action``, so targets are mapped back with ``(target - offset) / scale`` and played one per step by the
    deploy :class:`~robot_rl.deploy.chunking.ChunkExecutor` with policy.yaml's ``chunk_execution`` (as the
    policy node plays them), or open loop every ``execute_len`` steps when given (1: re-planned every step);
    :func:`~robot_rl.train.evaluation.evaluate` calls :meth:`reset` on done envs
    (``on_done``).
    """

    def __init__(self, runtime: PolicyRuntime, execute_len: int | None = None) -> None:
        self.runtime, self.execute_len = runtime, execute_len
        meta = runtime.meta
        self.H, self.A = meta.chunk_length, meta.action_dim
        self.offset = np.asarray(meta.action.offset, dtype=np.float32)
        self.scale = np.asarray(meta.action.scale, dtype=np.float32)
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
            chunks = (targets - self.offset) / self.scale
            self.queries += len(x)
        action = self.executor.step(chunks).astype(np.float32)
        return torch.from_numpy(action).to(obs.device)

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done.cpu().numpy())


def evaluate_artifact(artifact: Path, episodes: int, num_envs: int, seed: int,
                      video: Path | None = None, task: str | None = None,
                      execute_len: int | None = None) -> dict[str, Any]:
    """Summary of ``episodes`` episodes of the artifact on ``task`` (default: the artifact's).

    ``execute_len``: play the chunks open loop, re-querying every ``execute_len`` steps (1: re-planned every
    step), instead of policy.yaml's ``chunk_execution``; InputError unless in ``[1, chunk_length]``.
    """
    import sim

    task = task or load_meta(artifact).task  # manifest and policy.yaml checked before an env is built
    if not task:
        raise ArtifactError("names no task", file=Path(artifact) / META_FILE, key="task", value="",
                            fix="pass --task")
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    # the deploy validator, against the env's robot: joints, limits, default pose, ONNX I/O
    runtime = PolicyRuntime(artifact, robot=RobotSpec.from_robot(env.robot.as_dict()))
    H = runtime.meta.chunk_length
    if execute_len is not None and not 1 <= execute_len <= H:
        raise InputError(f"must be in [1, {H}], the artifact's chunk length", key="--execute-len", value=execute_len,
                         fix=f"pass 1 (re-plan every step) .. {H} (play whole chunks)")
    policy = ArtifactPolicy(runtime, execute_len)
    summary = evaluate(policy, env, episodes, seed, video, on_done=policy.reset).summary()
    if execute_len is not None:
        summary["execute_len"] = execute_len
    summary["task"] = task
    return summary
