"""What a task is, as data: :class:`TaskCfg` with its observation and reward terms (:class:`ObsTerm`,
:class:`RewardTerm`), and the checked override of reward weights from config (:func:`override_rewards`).

:class:`sim.env.TaskEnv` builds the batched env from a ``TaskCfg``; tasks write one in ``sim/tasks/<task>.py``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from sim.errors import SimInputError
from sim.randomization import DomainRandCfg
from sim.robots.model import SpecEdit

TermFn = Callable[..., torch.Tensor]


@dataclass
class ObsTerm:
    """One observation term: ``func(env, **params) -> [N, size]``, times ``scale``, plus uniform noise."""

    func: TermFn
    scale: float = 1.0
    noise: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardTerm:
    """One reward term: ``weight * func(env, **params)`` (``[N]``), counted in reward ``group``."""

    func: TermFn
    weight: float
    group: str = "task"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskCfg:
    """Everything that defines a task. Weights and ranges live here, never in term code."""

    robot: str
    episode_s: float
    observations: dict[str, dict[str, ObsTerm]]
    rewards: dict[str, RewardTerm]
    terminations: dict[str, TermFn] = field(default_factory=dict)
    success: TermFn | None = None
    success_terminates: bool = False
    scene: SpecEdit | None = None
    sites: tuple[str, ...] = ()
    """Site roles from robot.yaml (or MJCF site names added by ``scene``) the terms read."""
    bodies: tuple[str, ...] = ()
    init_joint_noise: float = 0.0
    """Half-width (rad) of the uniform noise added to the default pose at reset."""
    randomization: DomainRandCfg = field(default_factory=DomainRandCfg)
    control: dict[str, Any] = field(default_factory=dict)
    """Overrides of robot.yaml's ``control`` for this task, e.g. ``{"action_type": "joint_torque"}``, and
    ``max_step_change`` (rad per policy step: train under the deploy rate limit; see :mod:`sim.control`)."""
    observation_noise: bool = True
    """Add each policy term's ``noise`` (sim-to-real robustness); evaluation may turn it off."""
    params: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings (target ranges, command ranges, thresholds)."""
    cameras: tuple[str, ...] = ()
    """MJCF cameras rendered as observation groups ``camera_<name>`` (uint8 ``[N, 3, H, W]``); none: no GL."""
    image_size: int = 64
    """Height and width (pixels) of the camera groups' images."""
    camera_obs: bool = True
    """Render the cameras into every observation (groups ``camera_<name>``); False: only on request,
    :meth:`TaskEnv.camera_images` (a chunked policy that queries every k steps renders k times less)."""

    def __post_init__(self) -> None:
        if isinstance(self.cameras, str) or not all(isinstance(c, str) and c for c in self.cameras):
            raise SimInputError(f"task setting cameras = {self.cameras!r} must be a list of camera names, "
                                "e.g. [front, wrist]")
        self.cameras = tuple(self.cameras)
        if not isinstance(self.camera_obs, bool):
            raise SimInputError(f"task setting camera_obs = {self.camera_obs!r} must be true or false")
        if isinstance(self.image_size, bool) or not isinstance(self.image_size, int) \
                or not 8 <= self.image_size <= 1024:
            raise SimInputError(f"task setting image_size = {self.image_size!r} must be an integer in [8, 1024] "
                                "(pixels), e.g. 64")
        for name, value in (("episode_s", self.episode_s), ("init_joint_noise", self.init_joint_noise)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value < 0 or (name == "episode_s" and value == 0):
                raise SimInputError(f"task setting {name} = {value!r} must be a finite number "
                                    f"{'> 0 (seconds)' if name == 'episode_s' else '>= 0 (rad)'}")
        for key, value in self.params.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise SimInputError(f"task setting {key} = {value!r} must be finite")

    def replace(self, **changes: Any) -> TaskCfg:
        """A copy with top-level fields changed (``params`` entries are merged)."""
        params = {**self.params, **changes.pop("params", {})}
        return dataclasses.replace(self, params=params, **changes)


def compose_edits(*edits: SpecEdit | None) -> SpecEdit:
    """One scene edit that applies ``edits`` in order (``None`` entries skipped)."""
    def edit(spec) -> None:
        for one in edits:
            if one is not None:
                one(spec)

    return edit


def override_rewards(rewards: Mapping[str, RewardTerm], changes: Mapping[str, Any], task: str) -> dict[str, RewardTerm]:
    """``rewards`` (name -> :class:`RewardTerm`) with ``changes`` applied: name -> new weight, or
    name -> ``{weight: w, params: {...}}`` (params merged into the term's own). Unknown names, non-finite weights
    and unknown parameters are refused; weight 0 keeps the term in the episode logs but out of the reward."""
    out = dict(rewards)
    for name, change in changes.items():
        if name not in rewards:
            raise SimInputError(f"task {task!r} has no reward term {name!r}; its terms: {sorted(rewards)}. "
                                "Fix: task.env.rewards={<term>: <weight>} with one of those names")
        term = rewards[name]
        change = dict(change) if isinstance(change, Mapping) else {"weight": change}
        unknown = sorted(set(change) - {"weight", "params"})
        if unknown:
            raise SimInputError(f"task {task!r}: reward {name!r} has no setting {unknown[0]!r}; give a weight "
                                f"({name}: 2.0) or {{weight: ..., params: {{...}}}}")
        weight = change.get("weight", term.weight)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise SimInputError(f"task {task!r}: reward {name!r} weight {weight!r} must be a finite number")
        params = dict(change.get("params") or {})
        unknown = sorted(set(params) - set(term.params))
        if unknown:
            raise SimInputError(f"task {task!r}: reward {name!r} has no parameter {unknown[0]!r}; its parameters: "
                                f"{sorted(term.params)}")
        out[name] = dataclasses.replace(term, weight=float(weight), params={**term.params, **params})
    return out
