"""Run an exported policy with onnxruntime, one observation at a time (numpy only).

:class:`PolicyRuntime` loads ``policy.onnx``; :func:`chunk_executor` builds the
:class:`robot_rl.deploy.chunking.ChunkExecutor` that plays its ``[H, A]`` chunks the way policy.yaml's
``chunk_execution`` says (the way training collected them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.deploy.artifact import ArtifactError, PolicyMeta, check_joint_order
from robot_rl.deploy.chunking import ChunkExecutor
from robot_rl.deploy.validate import RobotSpec, load_policy


class PolicyRuntime:
    """An artifact ready to run: ``infer(obs [D]) -> targets [H, A]``.

    Validated at load by :func:`robot_rl.deploy.validate.load_policy` (manifest, policy.yaml, ONNX
    I/O and, given a robot, joints, limits and default pose); refused with an ArtifactError otherwise.

    Args:
        artifact_dir: directory written by ``robot_rl.export.export_policy``.
        robot_joint_names: the robot's joints in command order; refused if they differ from the
            artifact's in name or order (``robot`` checks these and more).
        robot: the robot's joints, limits and default pose (:class:`RobotSpec`).
        threads: onnxruntime intra-op threads (1 keeps latency low and predictable).
    """

    def __init__(self, artifact_dir: str | Path, robot_joint_names: list[str] | None = None,
                 threads: int = 1, robot: RobotSpec | None = None) -> None:
        self.meta, self.session = load_policy(artifact_dir, robot, threads)
        if self.meta.vla is not None:
            raise ArtifactError("is a VLA policy (inputs: vla): images, an instruction and the joint state in",
                                file=Path(artifact_dir) / "policy.yaml", key="inputs", value=self.meta.inputs,
                                fix="run it with robot_rl.deploy.vla_runtime.VLARuntime")
        if robot_joint_names is not None:
            check_joint_order(self.meta, robot_joint_names)
        # One observation at a time through preallocated buffers bound once (no per-call output allocation).
        H, A = self.meta.chunk_length, self.meta.action_dim
        self._obs = np.zeros((1, self.meta.observation_dim), dtype=np.float32)
        self._out = np.zeros((1, H * A), dtype=np.float32)
        self._binding = self.session.io_binding()
        self._binding.bind_cpu_input("obs", self._obs)
        self._binding.bind_output("action", "cpu", 0, np.float32, list(self._out.shape), self._out.ctypes.data)

    def infer(self, obs: np.ndarray) -> np.ndarray:
        """``obs [D]`` -> joint targets ``[H, A]`` float64 (a new array; not thread-safe)."""
        self._obs[0] = obs
        self.session.run_with_iobinding(self._binding)
        return self._out.reshape(self.meta.chunk_length, self.meta.action_dim).astype(np.float64)


def chunk_executor(meta: PolicyMeta, num_envs: int = 1, execute_len: int | None = None) -> ChunkExecutor:
    """The executor of ``meta``'s chunks for ``num_envs`` robots (policy.yaml's ``chunk_execution``).

    ``execute_len``: play the chunks open loop, re-querying every ``execute_len`` steps, instead (``1``: re-plan
    every step, the chunk's first action; for evaluation); ValueError unless in ``[1, H]``.
    """
    ex = meta.chunk_execution
    if execute_len is not None:
        return ChunkExecutor(num_envs, meta.chunk_length, meta.action_dim, "open_loop", execute_len, 0.0)
    return ChunkExecutor(num_envs, meta.chunk_length, meta.action_dim, ex.mode, ex.execute_len, ex.ensemble_decay)
