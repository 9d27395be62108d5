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
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.deploy.validate import RobotSpec
from robot_rl.train.evaluation import evaluate


class ArtifactPolicy:
    """Batched ONNX policy as the env sees it: raw obs ``[N, D]`` -> raw action ``[N, A]``.

    The artifact outputs joint targets ``offset + scale * action``; the env wants ``action``,
    so targets are mapped back with ``(target - offset) / scale`` (chunk step 0 when ``H > 1``).
    """

    def __init__(self, runtime: PolicyRuntime) -> None:
        self.runtime = runtime
        meta = runtime.meta
        self.A = meta.action_dim
        self.offset = np.asarray(meta.action.offset, dtype=np.float32)
        self.scale = np.asarray(meta.action.scale, dtype=np.float32)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """``[N, D]`` -> ``[N, A]`` on ``obs``'s device."""
        x = obs.detach().cpu().numpy().astype(np.float32)
        targets = self.runtime.session.run(None, {"obs": x})[0][:, : self.A]
        return torch.from_numpy((targets - self.offset) / self.scale).to(obs.device)


def evaluate_artifact(artifact: Path, episodes: int, num_envs: int, seed: int,
                      video: Path | None = None, task: str | None = None) -> dict[str, Any]:
    """Summary of ``episodes`` episodes of the artifact on ``task`` (default: the artifact's)."""
    import sim

    task = task or load_meta(artifact).task  # manifest and policy.yaml checked before an env is built
    if not task:
        raise ArtifactError("names no task", file=Path(artifact) / META_FILE, key="task", value="",
                            fix="pass --task")
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    # the deploy validator, against the env's robot: joints, limits, default pose, ONNX I/O
    runtime = PolicyRuntime(artifact, robot=RobotSpec.from_robot(env.robot.as_dict()))
    summary = evaluate(ArtifactPolicy(runtime), env, episodes, seed, video).summary()
    summary["task"] = task
    return summary
