"""Simulation backends, chosen by name (``sim.backend``).

``mujoco_batch`` (default): CPU, ``mujoco.batch.Batch`` (MuJoCo >= 4.0). ``mujoco_warp``: MuJoCo Warp on a
GPU or warp's CPU device (the ``[gpu]`` extra). Both implement :class:`sim.backends.base.SimBackend`.
"""

from __future__ import annotations

import importlib.metadata

import mujoco
import torch

from sim.backends.base import SimBackend
from sim.errors import SimInputError

BACKENDS = ("mujoco_batch", "mujoco_warp")


def check_backend(name: str) -> str:
    """``name`` if it is a backend of :data:`BACKENDS`, else a :class:`SimInputError` listing them."""
    if name not in BACKENDS:
        raise SimInputError(f"unknown sim backend {name!r}; use one of {', '.join(BACKENDS)}")
    return name


def mujoco_4_missing(what: str) -> SimInputError:
    """The refusal where MuJoCo >= 4 (``mujoco.batch``) is absent, e.g. in an Isaac Lab venv (mujoco 3)."""
    try:
        found = f"mujoco {importlib.metadata.version('mujoco')}"
    except importlib.metadata.PackageNotFoundError:
        found = "no mujoco"
    return SimInputError(f"{what} runs on our MuJoCo backend, which needs mujoco>=4.0 (mujoco.batch); this "
                         f"environment has {found} (an Isaac Lab venv pins mujoco 3); fix: train Isaac Lab tasks "
                         "here (sim.backend=isaaclab task.name=Isaac-Cartpole), or use the default install "
                         "for our tasks")


def make_backend(name: str, model: mujoco.MjModel, num_envs: int, joint_names: list[str], sites: dict[str, str],
                 bodies: list[str], decimation: int, device: torch.device | str, nthread: int = 0) -> SimBackend:
    """The backend ``name`` over ``model`` (arguments as :class:`SimBackend`; ``nthread`` is mujoco_batch's)."""
    if check_backend(name) == "mujoco_batch":
        try:
            from sim.backends.mujoco_batch import MujocoBatchBackend
        except ModuleNotFoundError as exc:
            if exc.name not in ("mujoco", "mujoco.batch"):
                raise
            raise mujoco_4_missing("this task") from None

        return MujocoBatchBackend(model, num_envs, joint_names, sites, bodies, decimation, device, nthread)
    try:
        from sim.backends.mujoco_warp import MujocoWarpBackend
    except ImportError as exc:
        raise SimInputError(f"sim.backend=mujoco_warp needs MuJoCo Warp, which is not installed ({exc}); "
                            "fix: pip install -e .[gpu]") from None
    return MujocoWarpBackend(model, num_envs, joint_names, sites, bodies, decimation, device)
