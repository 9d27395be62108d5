"""The backend-neutral view of simulation state that task logic reads, and env snapshots.

A backend (MuJoCo ``Batch`` on CPU, or MuJoCo Warp: :mod:`sim.backends`) fills one :class:`SimState`
per control step; observation, reward, termination and success terms read only this, so tasks
never touch a backend. Shapes use ``N = num_envs``; all tensors are float32 on the env's device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class SimState:
    """State of every env after the last physics substep.

    Attributes:
        qpos: ``[N, nq]`` generalized positions (free joints: xyz + wxyz quaternion).
        qvel: ``[N, nv]`` generalized velocities (free joints: world linear, local angular).
        joint_pos: ``[N, J]`` actuated joint positions in robot.yaml order.
        joint_vel: ``[N, J]`` actuated joint velocities in robot.yaml order.
        site_pos: ``[N, S, 3]`` world positions of the tracked sites (see ``site_index``).
        body_pos: ``[N, B, 3]`` world positions of the tracked bodies (see ``body_index``).
        body_quat: ``[N, B, 4]`` world orientations (wxyz) of the tracked bodies.
        actuator_force: ``[N, J]`` actuator forces (N m) of the last substep.
        site_index: site role -> index into ``site_pos``.
        body_index: body name -> index into ``body_*``.
    """

    qpos: torch.Tensor
    qvel: torch.Tensor
    joint_pos: torch.Tensor
    joint_vel: torch.Tensor
    site_pos: torch.Tensor
    body_pos: torch.Tensor
    body_quat: torch.Tensor
    actuator_force: torch.Tensor
    site_index: dict[str, int]
    body_index: dict[str, int]

    def site(self, role: str) -> torch.Tensor:
        """``[N, 3]`` world position of a tracked site."""
        return self.site_pos[:, self.site_index[role]]

    def body(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``([N, 3], [N, 4])`` world position and wxyz orientation of a tracked body."""
        i = self.body_index[name]
        return self.body_pos[:, i], self.body_quat[:, i]


@dataclass
class SimSnapshot:
    """Everything that decides how ``n`` envs continue: :meth:`sim.env.TaskEnv.capture_state` output.

    Restoring it (:meth:`~sim.env.TaskEnv.restore_state`) and stepping with the same actions gives
    the same observations bit for bit, as long as the env draws no random numbers on the way (the
    env's one seeded generator is shared by all envs and is not part of a snapshot: observation
    noise, action noise and the draws of a reset continue from its current stream).

    Attributes:
        physics: MuJoCo's integration state per env, float64 ``[n, ...]`` arrays by MjData field
            (``time [n]``, ``qpos [n, nq]``, ``qvel [n, nv]``, ``act``, ``history``, ``mocap_pos
            [n, nmocap, 3]``, ``mocap_quat``, ``qacc_warmstart``, ``ctrl [n, nu]``, ``qfrc_applied``,
            ``xfrc_applied``, ``eq_active``, ``userdata``, ``plugin_state``).
        buffers: the env's per-env tensors ``[n, ...]`` by name: ``episode_step``, ``action``,
            ``last_action``, episode sums, and the task's own (``target``, ``command``, timers).
        randomization: the domain randomiser's per-env draws, ``[n, ...]`` arrays by name (see
            :meth:`sim.randomization.DomainRandomizer.capture`).
    """

    physics: dict[str, np.ndarray]
    buffers: dict[str, torch.Tensor]
    randomization: dict[str, np.ndarray]

    @property
    def num_envs(self) -> int:
        """``n``, the number of envs captured."""
        return int(self.physics["qpos"].shape[0])
