"""What every simulation backend is: the model's index layout plus the calls :class:`sim.env.TaskEnv` makes.

A backend simulates ``num_envs`` copies of one compiled ``mujoco.MjModel``. This base class works out,
once, where the robot's joints, the tracked sites and bodies and the actuator history live in that
model (the same for every backend); subclasses own the physics state and implement the abstract calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import mujoco
import numpy as np
import torch

from sim.state import SimState

STATE_FIELDS = ("time", "qpos", "qvel", "act", "history", "mocap_pos", "mocap_quat", "qacc_warmstart", "ctrl",
                "qfrc_applied", "xfrc_applied", "eq_active", "userdata", "plugin_state")
"""MjData fields of MuJoCo's integration state (``mjSTATE_INTEGRATION``): what decides the next step."""

_HINGE_OR_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


class SimBackend(ABC):
    """``num_envs`` copies of ``model``, stepped together.

    Args:
        model: the compiled model; actuator ``i`` drives actuated joint ``i``.
        num_envs: number of simulations.
        joint_names: actuated joints, in command order (hinge or slide joints).
        sites: site role -> MJCF site name, the sites tasks read.
        bodies: MJCF body names tasks read.
        decimation: physics substeps per control step.
        device: torch device of the state tensors.
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, joint_names: list[str], sites: dict[str, str],
                 bodies: list[str], decimation: int, device: torch.device | str) -> None:
        self.model = model
        self.num_envs = num_envs
        self.decimation = decimation
        self.device = torch.device(device)
        joint_ids = [self._id(mujoco.mjtObj.mjOBJ_JOINT, n) for n in joint_names]
        bad = [n for n, j in zip(joint_names, joint_ids, strict=True) if int(model.jnt_type[j]) not in _HINGE_OR_SLIDE]
        if bad:
            raise ValueError(f"actuated joints must be hinge or slide joints, not {bad}")
        self._joint_qadr = torch.as_tensor(model.jnt_qposadr[joint_ids], device=self.device)
        self._joint_vadr = torch.as_tensor(model.jnt_dofadr[joint_ids], device=self.device)
        self.site_index = {role: i for i, role in enumerate(sites)}
        self._site_ids = [self._id(mujoco.mjtObj.mjOBJ_SITE, n) for n in sites.values()]
        self.body_index = {name: i for i, name in enumerate(bodies)}
        self._body_ids = [self._id(mujoco.mjtObj.mjOBJ_BODY, n) for n in bodies]
        self._history_values, self._history_nsample = self._control_history_layout(model)

    @staticmethod
    def _control_history_layout(model: mujoco.MjModel) -> tuple[np.ndarray | None, int]:
        """Indices ``[nu, nsample]`` of the past-control values in MjData.history, or None.

        An actuator's history block is ``[user, cursor, times[nsample], values[nsample]]``.
        """
        nsample = model.actuator_history[:, 0]
        if model.nu == 0 or not nsample.any():
            return None, 0
        if len(set(nsample.tolist())) != 1:
            raise ValueError("actuators with a delay must all keep the same number of history samples")
        n = int(nsample[0])
        start = model.actuator_historyadr[:, None] + 2 + n
        return start + np.arange(n)[None, :], n

    def _id(self, kind: mujoco.mjtObj, name: str) -> int:
        i = mujoco.mj_name2id(self.model, kind, name)
        if i < 0:
            raise KeyError(f"no {kind.name[6:].lower()} named {name!r} in the model")
        return i

    @property
    def joint_qpos_adr(self) -> torch.Tensor:
        """``[J]`` qpos addresses of the robot's joints, in robot.yaml order."""
        return self._joint_qadr

    def default_qpos(self) -> torch.Tensor:
        """``[nq]`` the model's reference configuration."""
        return torch.as_tensor(self.model.qpos0, dtype=torch.float32, device=self.device)

    @abstractmethod
    def read(self) -> SimState:
        """State of every env, as float32 tensors on ``device``."""

    @abstractmethod
    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl`` ``[N, nu]`` for ``decimation`` substeps in every env."""

    @abstractmethod
    def reset(self, ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        """Put envs ``ids`` in state ``qpos`` ``[n, nq]``, ``qvel`` ``[n, nv]``, ``ctrl`` ``[n, nu]``."""

    @abstractmethod
    def add_qvel(self, ids: np.ndarray, dofs: np.ndarray, delta: torch.Tensor) -> None:
        """Add ``delta`` ``[n, len(dofs)]`` to the velocities ``qvel[ids][:, dofs]`` (pushes); the next
        :meth:`step` integrates from them."""

    @abstractmethod
    def set_mocap_pos(self, ids: np.ndarray, mocap_index: int, pos: torch.Tensor) -> None:
        """Move mocap body ``mocap_index`` of envs ``ids`` to ``pos`` ``[n, 3]`` (markers, targets)."""

    @abstractmethod
    def capture(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """float64 copies of the integration state of envs ``ids``: ``{field: [n, ...]}``, ``STATE_FIELDS``."""

    @abstractmethod
    def restore(self, ids: np.ndarray, state: dict[str, np.ndarray]) -> None:
        """Put envs ``ids`` back in a :meth:`capture`'d state and recompute their kinematics."""

    @abstractmethod
    def jacobian(self, body: int, point: np.ndarray, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Jacobians ``(translational [n, 3, nv], rotational [n, 3, nv])`` of world ``point [n, 3]`` on ``body``."""

    @abstractmethod
    def expand(self, field: str) -> np.ndarray:
        """``[N, ...]`` per-env values of a model field, for domain randomisation.

        Rows written into it take effect by the next :meth:`reset` or :meth:`restore` of their envs (the
        CPU batch shares the memory; a device backend uploads the rows then).
        """

    @abstractmethod
    def set_const(self, ids: np.ndarray | None = None) -> None:
        """Recompute the constants MuJoCo derives from masses and options, per env."""

    @abstractmethod
    def snapshot(self, env_index: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
        """Model (with this env's randomised fields) and data of one env, e.g. to render it.

        The same MjModel/MjData pair is refilled on every call; copy them to keep a snapshot.
        """
