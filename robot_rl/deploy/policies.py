"""Drive a recording with an exported policy artifact (``policy.onnx`` + ``policy.yaml``), numpy only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.artifact import ArtifactError
from robot_rl.deploy.runtime import PolicyRuntime


def artifact_policy(artifact_dir: str | Path, joint_names: list[str],
                    observation_dim: int) -> Callable[[np.ndarray], np.ndarray]:
    """``policy(obs [N, D]) -> raw action [N, A]`` in ``[-1, 1]``, running the artifact on each row.

    The artifact outputs robot-unit joint targets ``[H, A]``; the first row is mapped back to the
    raw action (:func:`robot_rl.deploy.actions.to_raw` of the artifact's ActionSpec). Refuses
    (ArtifactError) an artifact whose joints differ from ``joint_names`` or whose observation size
    is not ``observation_dim``.
    """
    runtime = PolicyRuntime(artifact_dir, robot_joint_names=joint_names)
    if runtime.meta.observation_dim != observation_dim:
        raise ArtifactError(f"takes observations of size {runtime.meta.observation_dim}; the env's policy "
                            f"observation has {observation_dim}", file=Path(artifact_dir) / "policy.yaml",
                            fix="record in the task the policy was trained on (--task)")

    def policy(obs: np.ndarray) -> np.ndarray:
        return np.stack([to_raw(runtime.meta.action, runtime.infer(o)[0]) for o in obs]).astype(np.float32)

    return policy
