"""MuJoCo Warp backend: every env is one world of a ``mujoco_warp`` Data, on a GPU or on warp's CPU device.

``sim.backend=mujoco_warp`` (the ``[gpu]`` extra: ``pip install -e .[gpu]``). The model is put on the
device once; a control step writes the PD targets of all worlds into ``Data.ctrl`` (a torch view of the
warp array) and launches ``decimation`` ``mjw.step`` calls plus one ``mjw.kinematics`` so site and body
poses describe the new state, as the CPU backend's velocity-stage step does. On CUDA the substeps are
captured once as a CUDA graph and replayed. State is read through ``wp.to_torch`` views: no host copy on
a GPU. Physics runs in float32 (MuJoCo's CPU backend in float64).

Warp compiles its kernels the first time a model of a given structure is stepped (about 80 s for the
SO-101 on 2 CPU cores) and caches them in ``$WARP_CACHE_PATH`` (default ``~/.cache/warp/<version>``);
later processes load them in seconds. See docs/gpu.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import mujoco
import mujoco_warp as mjw
import numpy as np
import torch
import warp as wp

from sim.backends.base import STATE_FIELDS, SimBackend
from sim.errors import SimInputError
from sim.state import SimState

NCONMAX, NJMAX = 128, 256
"""Contacts and constraint rows allocated per world. MuJoCo Warp drops what does not fit (printing an
overflow warning); MuJoCo's own peaks under random actions are 8 contacts / 61 rows (G1), 7 / 42 (SO-101)."""


class MujocoWarpBackend(SimBackend):
    """``num_envs`` worlds of ``model`` in one ``mujoco_warp`` Data on ``device`` (``cpu`` or ``cuda[:i]``).

    Args: as :class:`sim.backends.base.SimBackend`.
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, joint_names: list[str], sites: dict[str, str],
                 bodies: list[str], decimation: int, device: torch.device | str = "cpu") -> None:
        super().__init__(model, num_envs, joint_names, sites, bodies, decimation, device)
        if self.device.type not in ("cpu", "cuda"):
            raise SimInputError(f"sim.backend=mujoco_warp runs on cpu or cuda, not {self.device}")
        if model.npluginstate:
            raise SimInputError("sim.backend=mujoco_warp: this model has plugin state, which MuJoCo Warp lacks; "
                                "use sim.backend=mujoco_batch")
        wp.init()
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        if self.device.type == "cuda":
            self.device = torch.device(self._wp_device)
        with wp.ScopedDevice(self._wp_device):
            self.warp_model = mjw.put_model(model)
            self.data = mjw.make_data(model, nworld=num_envs, nconmax=NCONMAX, njmax=NJMAX)
        self._host_data = mujoco.MjData(model)
        self._shapes = {f: np.shape(getattr(self._host_data, f)) for f in STATE_FIELDS}
        self._views = {f: wp.to_torch(getattr(self.data, f)) for f in STATE_FIELDS
                       if f != "plugin_state" and np.prod(self._shapes[f]) > 0}
        for f in ("site_xpos", "xpos", "xquat", "actuator_force"):
            self._views[f] = wp.to_torch(getattr(self.data, f))
        self._site_ids_t = torch.as_tensor(self._site_ids, dtype=torch.long, device=self.device)
        self._body_ids_t = torch.as_tensor(self._body_ids, dtype=torch.long, device=self.device)
        if self._history_values is not None:
            self._history_index = torch.as_tensor(self._history_values.ravel(), device=self.device)
        self._expanded: dict[str, tuple[np.ndarray, torch.Tensor]] = {}  # field -> (host rows, device view)
        self._graph = None
        self._snapshot_pair: tuple[mujoco.MjModel, mujoco.MjData] | None = None
        self._launch(mjw.reset_data)
        self._launch(mjw.forward)

    @contextmanager
    def _on_device(self) -> Iterator[None]:
        """Warp work on this backend's device, ordered after torch's pending work on the same tensors and
        before torch's next (CUDA: warp's stream waits for torch's current stream, then the reverse; no host
        synchronisation)."""
        with wp.ScopedDevice(self._wp_device):
            if self.device.type == "cpu":
                yield
                return
            torch_stream = wp.stream_from_torch(torch.cuda.current_stream(self.device))
            wp.get_stream().wait_stream(torch_stream)
            yield
            torch_stream.wait_stream(wp.get_stream())

    def _launch(self, function, *args) -> None:
        """``function(model, data, *args)`` on this backend's warp device."""
        with self._on_device():
            function(self.warp_model, self.data, *args)

    def _physics(self) -> None:
        """``decimation`` substeps, then the kinematics of the new state (site and body poses)."""
        for _ in range(self.decimation):
            mjw.step(self.warp_model, self.data)
        mjw.kinematics(self.warp_model, self.data)

    def _index(self, ids: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(ids, dtype=torch.long, device=self.device)

    def read(self) -> SimState:
        """State of every env, as float32 tensors on ``device`` (copies on the device, not views)."""
        v = self._views
        qpos, qvel = v["qpos"].clone(), v["qvel"].clone()
        return SimState(
            qpos=qpos,
            qvel=qvel,
            joint_pos=qpos[:, self._joint_qadr],
            joint_vel=qvel[:, self._joint_vadr],
            site_pos=v["site_xpos"][:, self._site_ids_t],
            body_pos=v["xpos"][:, self._body_ids_t],
            body_quat=v["xquat"][:, self._body_ids_t],
            actuator_force=v["actuator_force"].clone(),
            site_index=self.site_index,
            body_index=self.body_index,
        )

    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl`` ``[N, nu]`` for ``decimation`` substeps in every env."""
        self._views["ctrl"].copy_(ctrl.detach())
        with self._on_device():
            if self.device.type == "cpu":
                self._physics()
                return
            if self._graph is None:  # captured at the first step, and again after a model field was expanded
                with wp.ScopedCapture() as capture:
                    self._physics()
                self._graph = capture.graph
            wp.capture_launch(self._graph)

    def reset(self, ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        """Put envs ``ids`` in state ``qpos`` ``[n, nq]``, ``qvel`` ``[n, nv]``, ``ctrl`` ``[n, nu]``."""
        index = self._index(ids)
        self._upload_expanded(ids, index)
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[index] = True
        self._launch(mjw.reset_data, wp.from_torch(mask))
        v = self._views
        v["qpos"][index] = qpos.detach().to(self.device, torch.float32)
        v["qvel"][index] = qvel.detach().to(self.device, torch.float32)
        ctrl = ctrl.detach().to(self.device, torch.float32)
        v["ctrl"][index] = ctrl
        v["actuator_force"][index] = 0.0  # as mj_resetData leaves it
        if self._history_values is not None:
            # Delayed actuators read past controls: start them at the reset command, not at zero.
            v["history"][index[:, None], self._history_index[None, :]] = ctrl.repeat_interleave(
                self._history_nsample, dim=1)
        self._launch(mjw.kinematics)

    def add_qvel(self, ids: np.ndarray, dofs: np.ndarray, delta: torch.Tensor) -> None:
        """Add ``delta`` ``[n, len(dofs)]`` to ``qvel[ids][:, dofs]`` (pushes), in the device's ``Data.qvel``:
        the next :meth:`step` (its CUDA graph included: same memory) starts from them."""
        rows = self._index(ids)[:, None]
        cols = torch.as_tensor(dofs, dtype=torch.long, device=self.device)[None, :]
        self._views["qvel"][rows, cols] += delta.detach().to(self.device, torch.float32)

    def set_mocap_pos(self, ids: np.ndarray, mocap_index: int, pos: torch.Tensor) -> None:
        """Move mocap body ``mocap_index`` of envs ``ids`` to ``pos`` ``[n, 3]`` (markers, targets)."""
        self._views["mocap_pos"][self._index(ids), mocap_index] = pos.detach().to(self.device, torch.float32)

    def capture(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """float64 copies (of float32 state) of envs ``ids``: ``{field: [n, ...]}``, ``STATE_FIELDS``."""
        index = self._index(ids)
        out = {}
        for field in STATE_FIELDS:
            shape = (len(ids), *self._shapes[field])
            view = self._views.get(field)
            out[field] = np.zeros(shape) if view is None else \
                view[index].cpu().numpy().astype(np.float64).reshape(shape)
        return out

    def restore(self, ids: np.ndarray, state: dict[str, np.ndarray]) -> None:
        """Put envs ``ids`` back in a :meth:`capture`'d state and recompute their kinematics."""
        index = self._index(ids)
        self._upload_expanded(ids, index)
        for field, view in self._views.items():
            if field in STATE_FIELDS:
                rows = view[index]
                view[index] = torch.as_tensor(np.asarray(state[field])).reshape(rows.shape).to(rows)
        self._launch(mjw.kinematics)

    def jacobian(self, body: int, point: np.ndarray, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Jacobians ``(translational [n, 3, nv], rotational [n, 3, nv])`` float64 of world ``point [n, 3]`` on
        ``body``, computed on the host (``mj_jac``) from each env's positions."""
        ids = np.arange(self.num_envs) if ids is None else ids
        qpos = self._views["qpos"][self._index(ids)].cpu().double().numpy()
        jac = np.zeros((2, len(ids), 3, self.model.nv))
        data = self._host_data
        for k in range(len(ids)):
            data.qpos[:] = qpos[k]
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_comPos(self.model, data)
            mujoco.mj_jac(self.model, data, jac[0, k], jac[1, k], np.asarray(point[k], dtype=np.float64), body)
        return jac[0], jac[1]

    def expand(self, field: str) -> np.ndarray:
        """Host ``[N, ...]`` per-env values of a model field, for domain randomisation.

        The field becomes one row per world in the warp model. What is written into the returned array
        reaches the device for envs ``ids`` at the next :meth:`reset` or :meth:`restore` of those envs (the
        randomiser writes a row just before either).
        """
        if field not in self._expanded:
            shared = getattr(self.warp_model, field)
            rows = np.repeat(shared.numpy()[:1], self.num_envs, axis=0)
            batched = wp.array(rows, dtype=shared.dtype, device=self._wp_device)
            setattr(self.warp_model, field, batched)
            self._expanded[field] = (rows, wp.to_torch(batched))
            self._graph = None
        return self._expanded[field][0]

    def _upload_expanded(self, ids: np.ndarray, index: torch.Tensor) -> None:
        """Copy rows ``ids`` of the per-env model fields from their host arrays to the device."""
        for rows, on_device in self._expanded.values():
            on_device[index] = torch.from_numpy(rows[ids]).to(on_device)

    def set_const(self, ids: np.ndarray | None = None) -> None:
        """Not available: MuJoCo Warp's ``set_const`` derives one set of constants, not one per world."""
        raise SimInputError("sim.backend=mujoco_warp cannot re-derive per-env mass constants (mass_scale "
                            "randomisation); turn mass_scale off for the task or use sim.backend=mujoco_batch")

    def snapshot(self, env_index: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
        """Model (with this env's randomised fields) and data of one env, forward-computed on the host.

        The same MjModel/MjData pair is refilled on every call; copy them to keep a snapshot.
        """
        if self._snapshot_pair is None:
            self._snapshot_pair = (self.model.__copy__(), mujoco.MjData(self.model))
        model, data = self._snapshot_pair
        for field, (rows, _) in self._expanded.items():
            getattr(model, field)[:] = rows[env_index].reshape(getattr(model, field).shape)
        state = self.capture(np.array([env_index]))
        data.time = float(state["time"][0])
        for field in STATE_FIELDS[1:]:
            if state[field].size:
                getattr(data, field)[:] = state[field][0].reshape(np.shape(getattr(data, field)))
        mujoco.mj_forward(model, data)
        return model, data
