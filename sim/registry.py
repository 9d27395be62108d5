"""Task registry: task name -> ``"module:factory"``, imported only when the task is made.

A factory is ``factory(num_envs, device, seed, **overrides) -> VecEnv``. For tasks built on
:class:`sim.env.TaskEnv`, :func:`make_task_env` applies overrides to the task's config: a
:class:`sim.task_cfg.TaskCfg` field (``episode_s=2.0``) or an entry of its ``params``
(``success_radius=0.03``); anything else is refused with the list of valid keys.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

from sim.backends import check_backend, mujoco_4_missing
from sim.errors import SimInputError, UnknownTaskError
from sim.task_cfg import override_rewards
from sim.vecenv import VecEnv

_TASKS: dict[str, str] = {}
GYM_PREFIX = "gym:"
"""``make_env("gym:Pendulum-v1")`` wraps any gymnasium id with :class:`sim.gym_adapter.GymVecEnvAdapter`."""
BACKENDS = ("mujoco_batch", "mujoco_warp", "isaaclab")
"""``mujoco_batch`` / ``mujoco_warp`` (:mod:`sim.backends`): our tasks, and ``gym:<id>`` on ``mujoco_batch``;
``isaaclab``: an Isaac Lab task id, through :class:`sim.isaaclab_adapter.IsaacLabVecEnvAdapter`."""


def register_task(name: str, factory: str) -> None:
    """Register ``factory`` (``"package.module:function"``) under ``name``; names are unique."""
    if name in _TASKS and _TASKS[name] != factory:
        raise ValueError(f"task {name!r} is already registered to {_TASKS[name]}")
    _TASKS[name] = factory


def list_tasks() -> list[str]:
    """Names of every registered task."""
    return sorted(_TASKS)


def make_env(task: str, num_envs: int = 1, device: str = "cpu", seed: int = 0, backend: str = "mujoco_batch",
             **overrides: Any) -> VecEnv:
    """Build the batched env of ``task`` with ``num_envs`` copies on ``device``, simulated by ``backend``.

    ``backend`` (:data:`BACKENDS`) is ``mujoco_batch`` (CPU, the default) or ``mujoco_warp`` (MuJoCo Warp, the
    ``[gpu]`` extra) for our robot tasks (the gymnasium tasks run on ``mujoco_batch`` / gymnasium only), or
    ``isaaclab`` with an Isaac Lab task id.

    Raises:
        UnknownTaskError: unknown task (a ``KeyError``; the message lists the known ones).
        SimInputError: a seed outside ``[0, 2**63)``, ``num_envs < 1``, an unknown backend or one the task
            cannot run on, mujoco_warp not installed, or one of our tasks where MuJoCo >= 4 is not installed
            (e.g. in an Isaac Lab environment).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise SimInputError(f"seed {seed!r} must be an integer in [0, 2**63); fix: pick a smaller seed, e.g. 0")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise SimInputError(f"num_envs {num_envs!r} must be an integer >= 1")
    if backend not in BACKENDS:
        raise SimInputError(f"unknown sim backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "isaaclab":
        from sim.isaaclab_adapter import make_isaaclab_env  # imported here: isaaclab only when asked for

        return make_isaaclab_env(task, num_envs=num_envs, device=device, seed=seed, **overrides)
    if check_backend(backend) != "mujoco_batch":
        if task.startswith(GYM_PREFIX) or task in GYM_ONLY_BATCH:
            raise SimInputError(f"task {task!r} runs on sim.backend=mujoco_batch only, not {backend}")
        overrides["backend"] = backend
    if task.startswith(GYM_PREFIX):
        from sim.gym_adapter import make_gym_env  # imported here: gymnasium only when asked for

        return make_gym_env(task[len(GYM_PREFIX):], num_envs=num_envs, device=device, seed=seed, **overrides)
    if task not in _TASKS:
        raise UnknownTaskError(f"unknown task {task!r}; known tasks: {', '.join(list_tasks())}, "
                       f"or {GYM_PREFIX}<gymnasium id> (e.g. {GYM_PREFIX}Pendulum-v1)")
    module, _, function = _TASKS[task].partition(":")
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in ("mujoco", "mujoco.batch"):
            raise
        raise mujoco_4_missing(f"task {task!r}") from None
    factory: Callable[..., VecEnv] = getattr(imported, function)
    return factory(num_envs=num_envs, device=device, seed=seed, **overrides)


def apply_overrides(cfg: Any, overrides: dict[str, Any], task: str) -> Any:
    """A copy of a TaskCfg with ``overrides`` applied to its fields or its ``params``.

    A mapping for a dataclass field replaces those of its settings; one for a dict field (``control``) is merged
    into the task's own, so ``control={"max_step_change": 0.15}`` keeps a task's ``action_scale``; ``rewards``
    changes the weights (and parameters) of the task's own terms (:func:`override_rewards`).
    """
    fields = {f.name for f in dataclasses.fields(cfg)} - {"params"}
    top = {k: v for k, v in overrides.items() if k in fields}
    for key, value in top.items():  # a mapping for a dataclass field (from YAML/Hydra) builds it
        default = getattr(cfg, key)
        if dataclasses.is_dataclass(default) and isinstance(value, Mapping):
            valid = {f.name for f in dataclasses.fields(default) if f.init}
            unknown = sorted(set(value) - valid)
            if unknown:
                raise SimInputError(f"task {task!r}: {key} has no setting {unknown[0]!r}; valid: {sorted(valid)}")
            top[key] = dataclasses.replace(default, **{k: tuple(v) if isinstance(v, list) else v
                                                       for k, v in value.items()})
        elif key == "rewards" and isinstance(value, Mapping):
            top[key] = override_rewards(default, value, task)
        elif isinstance(default, dict) and isinstance(value, Mapping):  # control: merged, so a task's own keys stay
            top[key] = {**default, **value}
    params = {k: v for k, v in overrides.items() if k not in fields}
    unknown = sorted(set(params) - set(cfg.params))
    if unknown:
        raise SimInputError(f"task {task!r} has no setting {unknown[0]!r}; valid: "
                         f"{sorted(fields | set(cfg.params))}")
    return cfg.replace(params=params, **top)


def make_task_env(env_cls: type, cfg: Any, task: str, num_envs: int, device: str, seed: int,
                  nthread: int = 0, backend: str = "mujoco_batch", **overrides: Any) -> VecEnv:
    """Build a TaskEnv subclass from its default config and the caller's overrides, on ``backend``."""
    return env_cls(apply_overrides(cfg, overrides, task), num_envs=num_envs, device=device, seed=seed,
                   nthread=nthread, backend=backend)


for _name, _factory in {
    "so101_reach": "sim.tasks.so101_reach:make",
    "so101_reach_deploy": "sim.tasks.so101_reach:make_deploy",
    "g1_stand": "sim.tasks.g1_locomotion:make_stand",
    "g1_walk": "sim.tasks.g1_locomotion:make_walk",
    "g1_stand_gait": "sim.tasks.g1_locomotion:make_stand_gait",
    "g1_walk_gait": "sim.tasks.g1_locomotion:make_walk_gait",
    "g1_reach_walk": "sim.tasks.g1_reach_walk:make",
    "so101_lift": "sim.tasks.so101_lift:make",
    "so101_lift_shaped": "sim.tasks.so101_lift:make_shaped",
    "so101_reach_lang": "sim.tasks.so101_reach_lang:make",
    "so101_pick_lang": "sim.tasks.so101_pick_lang:make",
    "panda_reach": "sim.tasks.panda_reach:make",
    "panda_reach_torque": "sim.tasks.panda_reach:make_torque",
    "half_cheetah": "sim.tasks.gym_locomotion:make_half_cheetah",
    "hopper": "sim.tasks.gym_locomotion:make_hopper",
    "walker2d": "sim.tasks.gym_locomotion:make_walker2d",
    "ant": "sim.tasks.gym_locomotion:make_ant",
    "humanoid": "sim.tasks.gym_locomotion:make_humanoid",
}.items():
    register_task(_name, _factory)

GYM_ONLY_BATCH = frozenset(name for name, factory in _TASKS.items() if factory.startswith("sim.tasks.gym_locomotion:"))
"""Tasks built on gymnasium's models that step ``mujoco.batch`` directly (no backend choice)."""
