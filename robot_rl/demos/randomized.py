"""Domain-randomised physics of a recorded episode: the dataset columns of the randomiser's draws.

A task's :class:`sim.randomization.DomainRandCfg` draws per-env physics at every reset (friction,
masses, actuator gains and delays, action latency). Replaying an episode in a fresh env draws other
values, so the recorder stores the draws (``env.capture_state().randomization``) with every frame
and replay restores them (``env.restore_state``). Columns, one per draw the task makes:

- ``sim.geom_friction`` float64 ``[ngeom]``  sliding friction of every geom
- ``sim.body_mass`` float64 ``[nbody]``      body masses
- ``sim.actuator_gain`` float64 ``[nu]``, ``sim.actuator_bias`` float64 ``[2 * nu]`` PD gains (kp, -kp, -kd)
- ``sim.actuator_delay`` float64 ``[nu]``    MuJoCo actuator delays (s)
- ``sim.action_delay`` int64 ``[1]``         latency in control steps

Per-step action noise (``action_noise_std``) is random at every step and is not reproducible. The
delayed actions in flight (``action_history``) are empty at an episode's start and are not stored.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sim.randomization import DomainRandCfg

RECORDED = ("geom_friction", "body_mass", "actuator_gain", "actuator_bias", "actuator_delay", "action_delay")
"""The draws of :meth:`sim.randomization.DomainRandomizer.capture` a dataset stores, as ``sim.<name>``."""


def randomized_columns(draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{sim.<name>: [n, ...]}`` dataset columns of a snapshot's ``randomization`` draws ``{name: [n, ...]}``."""
    return {f"sim.{name}": draws[name] for name in RECORDED if name in draws}


def randomized_features(env) -> dict[str, dict[str, Any]]:
    """LeRobot features for the physics ``env``'s randomisation draws (none when it draws nothing)."""
    columns = randomized_columns(env.capture_state([0]).randomization)
    return {key: {"dtype": str(value.dtype), "shape": list(value.shape[1:]), "names": None}
            for key, value in columns.items()}


def keys_in(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draws recorded in an episode's columns, first frame each, as ``{name: [1, ...]}`` for ``restore_state``."""
    return {name: np.asarray(data[f"sim.{name}"][:1]) for name in RECORDED if f"sim.{name}" in data}


def cfg_to_json(cfg: DomainRandCfg) -> dict[str, Any]:
    """A DomainRandCfg as JSON-ready values (ranges as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def cfg_from_json(raw: dict[str, Any]) -> DomainRandCfg:
    """Inverse of :func:`cfg_to_json`."""
    return DomainRandCfg(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
