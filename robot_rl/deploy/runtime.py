"""Run an exported policy with onnxruntime, one observation at a time (numpy only).

:class:`PolicyRuntime` loads ``policy.onnx``; :class:`ChunkExecutor` turns ``[H, A]`` action chunks
into one target per control step, open-loop or with temporal ensembling (ACT-style).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from robot_rl.deploy.artifact import check_joint_order
from robot_rl.deploy.validate import RobotSpec, load_policy

CHUNK_MODES = ("open_loop", "temporal_ensemble")


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


class ChunkExecutor:
    """Pick the target of each control step from chunks ``[H, A]``.

    ``open_loop``: infer once every ``H`` steps and play the chunk out. ``temporal_ensemble``:
    infer every step and average, for step t, the predictions ``chunk_{t-k}[k]`` of every chunk
    still covering t with weights ``exp(-decay * k)`` (the newest prediction weighs most).
    """

    def __init__(self, chunk_length: int, mode: str = "open_loop", decay: float = 0.01):
        if mode not in CHUNK_MODES:
            raise ValueError(f"chunk mode {mode!r} must be one of {CHUNK_MODES}.")
        self.H, self.mode, self.decay = chunk_length, mode, decay
        self.reset()

    def reset(self) -> None:
        """Forget every chunk (after a stop, e-stop or stale state)."""
        self._chunks: deque[np.ndarray] = deque(maxlen=self.H)
        self._index = 0

    def needs_inference(self) -> bool:
        """Whether the next :meth:`next_target` call needs a fresh chunk."""
        return self.mode == "temporal_ensemble" or not self._chunks or self._index >= self.H

    def next_target(self, chunk: np.ndarray | None) -> np.ndarray:
        """``[A]`` target for this step; ``chunk [H, A]`` must be given when :meth:`needs_inference`."""
        if self.needs_inference():
            if chunk is None:
                raise ValueError("a new chunk is needed for this step (needs_inference() is True).")
            self._chunks.append(np.asarray(chunk, dtype=np.float64))
            self._index = 0
        if self.mode == "open_loop":
            target = self._chunks[-1][self._index]
            self._index += 1
            return target
        ages = np.arange(len(self._chunks))[::-1]  # newest chunk has age 0
        preds = np.stack([c[k] for c, k in zip(self._chunks, ages, strict=True)])
        weights = np.exp(-self.decay * ages)
        return (weights[:, None] * preds).sum(0) / weights.sum()
