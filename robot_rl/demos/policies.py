"""Drive a recording with an exported policy artifact (``policy.onnx`` + ``policy.yaml``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.runtime import PolicyRuntime


def artifact_policy(artifact_dir: str | Path, env):
    """``policy(env, obs) -> action [N, A]`` running the artifact on each env's policy observation.

    The artifact outputs robot-unit joint targets ``[H, A]``; the first row is mapped back to the
    raw action the env expects (:func:`robot_rl.deploy.actions.to_raw` of the artifact's ActionSpec).
    Refuses (ArtifactError) an artifact whose joints or observation size differ from ``env``'s.
    """
    runtime = PolicyRuntime(artifact_dir, robot_joint_names=env.robot.joint_names)
    if runtime.meta.observation_dim != env.observation_dims["policy"]:
        raise ValueError(
            f"{artifact_dir} takes observations of size {runtime.meta.observation_dim}; the env's "
            f"policy observation has {env.observation_dims['policy']}: record its training task"
        )

    def policy(env, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        rows = [to_raw(runtime.meta.action, runtime.infer(o)[0]) for o in obs["policy"].cpu().numpy()]
        return torch.as_tensor(np.stack(rows), dtype=torch.float32, device=env.device)

    return policy
