"""Domain-randomised physics of a recorded episode: capture it, and put it back for replay.

A task's :class:`sim.randomization.DomainRandCfg` draws per-env physics at every reset (friction,
masses, actuator gains, action latency). Replaying an episode in a fresh env draws other values,
so the recorder stores the drawn values with every frame and replay writes them back:

- ``sim.geom_friction`` float64 ``[ngeom]``  sliding friction of every geom
- ``sim.body_mass`` float64 ``[nbody]``      body masses
- ``sim.actuator_gain`` float64 ``[nu]``, ``sim.actuator_bias`` float64 ``[2 * nu]`` PD gains (kp, -kp, -kd)
- ``sim.action_delay`` int64 ``[1]``         latency in control steps

Per-step action noise (``action_noise_std``) is random at every step and is not reproducible.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sim.randomization import DomainRandCfg


def randomized_features(env) -> dict[str, dict[str, Any]]:
    """LeRobot features for the physics ``env``'s randomisation draws (none when it draws nothing)."""
    cfg, model = env.cfg.randomization, env.model
    out: dict[str, dict[str, Any]] = {}
    if cfg.friction_scale:
        out["sim.geom_friction"] = {"dtype": "float64", "shape": [model.ngeom], "names": None}
    if cfg.mass_scale:
        out["sim.body_mass"] = {"dtype": "float64", "shape": [model.nbody], "names": None}
    if cfg.actuator_gain_scale:
        out["sim.actuator_gain"] = {"dtype": "float64", "shape": [model.nu], "names": None}
        out["sim.actuator_bias"] = {"dtype": "float64", "shape": [2 * model.nu], "names": None}
    if cfg.action_delay_steps:
        out["sim.action_delay"] = {"dtype": "int64", "shape": [1], "names": None}
    return out


def capture_randomized(env) -> dict[str, np.ndarray]:
    """The current draws of every env, ``{feature: [N, ...]}`` (see :func:`randomized_features`)."""
    cfg, backend = env.cfg.randomization, env.backend
    out: dict[str, np.ndarray] = {}
    if cfg.friction_scale:
        out["sim.geom_friction"] = np.array(backend.expand("geom_friction")[:, :, 0], dtype=np.float64)
    if cfg.mass_scale:
        out["sim.body_mass"] = np.array(backend.expand("body_mass"), dtype=np.float64)
    if cfg.actuator_gain_scale:
        out["sim.actuator_gain"] = np.array(backend.expand("actuator_gainprm")[:, :, 0], dtype=np.float64)
        bias = np.array(backend.expand("actuator_biasprm")[:, :, 1:3], dtype=np.float64)
        out["sim.actuator_bias"] = bias.reshape(bias.shape[0], -1)
    if cfg.action_delay_steps:
        out["sim.action_delay"] = env.randomizer.action_delay.cpu().numpy().astype(np.int64).reshape(-1, 1)
    return out


def restore_randomized(env, values: dict[str, np.ndarray]) -> None:
    """Write one episode's recorded draws (``{feature: [...]}``, first frame) into env 0."""
    backend = env.backend
    if "sim.geom_friction" in values:
        backend.expand("geom_friction")[0, :, 0] = values["sim.geom_friction"]
    if "sim.body_mass" in values:
        backend.expand("body_mass")[0] = values["sim.body_mass"]
        backend.set_const(np.array([0]))
    if "sim.actuator_gain" in values:
        backend.expand("actuator_gainprm")[0, :, 0] = values["sim.actuator_gain"]
        backend.expand("actuator_biasprm")[0, :, 1:3] = values["sim.actuator_bias"].reshape(-1, 2)
    if "sim.action_delay" in values:
        env.randomizer.action_delay[0] = int(np.asarray(values["sim.action_delay"]).reshape(-1)[0])


def cfg_to_json(cfg: DomainRandCfg) -> dict[str, Any]:
    """A DomainRandCfg as JSON-ready values (ranges as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def cfg_from_json(raw: dict[str, Any]) -> DomainRandCfg:
    """Inverse of :func:`cfg_to_json`."""
    return DomainRandCfg(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def keys_in(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The randomisation features present in an episode's columns, first frame each."""
    return {
        k: data[k][0]
        for k in ("sim.geom_friction", "sim.body_mass", "sim.actuator_gain", "sim.actuator_bias", "sim.action_delay")
        if k in data
    }
