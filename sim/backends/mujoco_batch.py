"""CPU backend: every env is one simulation of a ``mujoco.batch.Batch`` (MuJoCo >= 4.0).

Python touches the batch once per control step: it writes the PD targets of all envs and calls
``Batch.step(nstep=decimation)``, which runs the substeps of every env on MuJoCo's C thread pool.
The batch is persistent and each call ends at the velocity stage, so positions, site poses and
velocities read afterwards describe the state after the last substep, at no extra cost.
"""

from __future__ import annotations

import mujoco
import mujoco.batch
import numpy as np
import torch

from sim.backends.base import STATE_FIELDS, SimBackend
from sim.state import SimState


class MujocoBatchBackend(SimBackend):
    """``num_envs`` copies of ``model`` stepped together on a C thread pool.

    Args: as :class:`sim.backends.base.SimBackend`, and ``nthread``: C threads (0: all CPUs).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        joint_names: list[str],
        sites: dict[str, str],
        bodies: list[str],
        decimation: int,
        device: torch.device | str = "cpu",
        nthread: int = 0,
    ) -> None:
        super().__init__(model, num_envs, joint_names, sites, bodies, decimation, device)
        self.batch = mujoco.batch.Batch(model, nsim=num_envs, nthread=nthread, persistent=True)
        for field in ("qpos", "qvel", "ctrl", "site_xpos", "xpos", "xquat", "actuator_force"):
            setattr(self, f"_{field}", self.batch.bind(field))
        if self._history_values is not None:
            self._history = self.batch.bind("history")
        self._no_bodies = (torch.zeros(num_envs, 0, 3, device=self.device),
                           torch.zeros(num_envs, 0, 4, device=self.device))
        self.batch.reset()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(self.device)

    def read(self) -> SimState:
        """State of every env, as float32 tensors on ``device``."""
        qpos = self._tensor(self._qpos)
        qvel = self._tensor(self._qvel)
        return SimState(
            qpos=qpos,
            qvel=qvel,
            joint_pos=qpos[:, self._joint_qadr],
            joint_vel=qvel[:, self._joint_vadr],
            site_pos=self._tensor(self._site_xpos[:, self._site_ids]),
            body_pos=self._tensor(self._xpos[:, self._body_ids]) if self._body_ids else self._no_bodies[0],
            body_quat=self._tensor(self._xquat[:, self._body_ids]) if self._body_ids else self._no_bodies[1],
            actuator_force=self._tensor(self._actuator_force),
            site_index=self.site_index,
            body_index=self.body_index,
        )

    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl`` ``[N, nu]`` for ``decimation`` substeps in every env."""
        self._ctrl[:] = ctrl.detach().to("cpu", torch.float64).numpy()
        self.batch.step(nstep=self.decimation, stage=mujoco.mjtStage.mjSTAGE_VEL)

    def reset(self, ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        """Put envs ``ids`` in state ``qpos`` ``[n, nq]``, ``qvel`` ``[n, nv]``, ``ctrl`` ``[n, nu]``."""
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        self._qpos[ids] = qpos.detach().to("cpu", torch.float64).numpy()
        self._qvel[ids] = qvel.detach().to("cpu", torch.float64).numpy()
        ctrl_np = ctrl.detach().to("cpu", torch.float64).numpy()
        self._ctrl[ids] = ctrl_np
        if self._history_values is not None:
            # Delayed actuators read past controls: start them at the reset command, not at zero.
            self._history[np.ix_(ids, self._history_values.ravel())] = np.repeat(ctrl_np, self._history_nsample, 1)
        self.batch.forward(ids, stage=mujoco.mjtStage.mjSTAGE_VEL)

    def add_qvel(self, ids: np.ndarray, dofs: np.ndarray, delta: torch.Tensor) -> None:
        """Add ``delta`` ``[n, len(dofs)]`` to ``qvel[ids][:, dofs]`` (pushes); the next :meth:`step` starts there."""
        self._qvel[np.ix_(ids, dofs)] += delta.detach().to("cpu", torch.float64).numpy()

    def set_mocap_pos(self, ids: np.ndarray, mocap_index: int, pos: torch.Tensor) -> None:
        """Move mocap body ``mocap_index`` of envs ``ids`` to ``pos`` ``[n, 3]`` (markers, targets)."""
        if not hasattr(self, "_mocap_pos"):
            self._mocap_pos = self.batch.bind("mocap_pos")
        self._mocap_pos[ids, mocap_index] = pos.detach().to("cpu", torch.float64).numpy()

    def capture(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Exact float64 copies of the integration state of envs ``ids``: ``{field: [n, ...]}``, ``STATE_FIELDS``."""
        return {field: np.array(self.batch.bind(field)[ids], dtype=np.float64) for field in STATE_FIELDS}

    def restore(self, ids: np.ndarray, state: dict[str, np.ndarray]) -> None:
        """Put envs ``ids`` back in a :meth:`capture`'d state and recompute their kinematics (velocity stage)."""
        for field in STATE_FIELDS:
            self.batch.bind(field)[ids] = state[field]
        self.batch.forward(ids, stage=mujoco.mjtStage.mjSTAGE_VEL)

    def jacobian(self, body: int, point: np.ndarray, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Jacobians ``(translational [n, 3, nv], rotational [n, 3, nv])`` of world ``point [n, 3]`` on ``body``."""
        return self.batch.jac(body, point, ids)

    def expand(self, field: str) -> np.ndarray:
        """Live ``[N, ...]`` per-env values of a model field, for domain randomisation."""
        return self.batch.expand(field)

    def set_const(self, ids: np.ndarray | None = None) -> None:
        """Recompute the constants MuJoCo derives from masses and options, per env."""
        self.batch.set_const(ids)

    def snapshot(self, env_index: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
        """Model (with this env's randomised fields) and data of one env, e.g. to render it.

        The same MjModel/MjData pair is refilled on every call (so a renderer built for it is reused);
        copy them to keep a snapshot.
        """
        if not hasattr(self, "_snapshot"):
            self._snapshot = (self.batch.get_model(env_index), self.batch.get_data(env_index))
        model, data = self._snapshot
        self.batch.get_model(env_index, model)
        self.batch.get_data(env_index, data)
        mujoco.mj_forward(model, data)
        return model, data
