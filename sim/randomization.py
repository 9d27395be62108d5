"""Per-env domain randomisation: physics fields through ``Batch.expand``, action noise and latency, pushes.

Physics fields (friction, link masses, PD gains, actuator delay) are resampled for an env each time
it resets, from the env's seeded generator, so a run is reproducible under its seed. Two kinds of
latency: ``actuator_delay_s`` is MuJoCo's own actuator delay at physics resolution (a command
reaches the motor that many seconds later, per env — the few-millisecond transport latency of a
real robot's bus), and ``action_delay_steps`` delays whole control steps, kept in a small ring of
past actions (backend-neutral).

Pushes (legged_gym's ``push_robots``, Isaac Lab's interval ``push_by_setting_velocity`` event): each env keeps
a timer drawn uniformly in ``push_interval_s`` (in whole control steps) at its reset and after every push;
when it runs out, a planar velocity, each of x and y uniform in ``[-push_velocity, push_velocity]`` m/s
(world frame), is added to the floating base's ``qvel`` before that control step's physics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

Range = tuple[float, float]


@dataclass
class DomainRandCfg:
    """Ranges of the randomised quantities; ``None`` (or 0) disables one.

    Attributes:
        friction_scale: multiplies every geom's sliding friction.
        mass_scale: multiplies every body's mass.
        actuator_gain_scale: multiplies every position actuator's kp (and kd, so the damping
            ratio is kept).
        actuator_delay_s: each env's command-to-motor delay in seconds (MuJoCo actuator delay,
            physics-step resolution), e.g. ``(0.0, 0.01)``.
        action_delay_steps: each env's latency is drawn in ``[0, action_delay_steps]`` control steps.
        action_noise_std: Gaussian noise added to the action the actuators receive.
        push_interval_s: seconds between two pushes of an env, drawn per env and push, e.g. ``(5.0, 8.0)``;
            needs a floating-base robot.
        push_velocity: largest push (m/s) along each of world x and y, added to the base's velocity.
    """

    friction_scale: Range | None = None
    mass_scale: Range | None = None
    actuator_gain_scale: Range | None = None
    actuator_delay_s: Range | None = None
    action_delay_steps: int = 0
    action_noise_std: float = 0.0
    push_interval_s: Range | None = None
    push_velocity: float = 0.0

    def __post_init__(self) -> None:
        for name in ("friction_scale", "mass_scale", "actuator_gain_scale"):
            value = getattr(self, name)
            if value is not None and not (len(value) == 2 and 0 < value[0] <= value[1]):
                raise ValueError(f"DomainRandCfg.{name}={value!r}: use (low, high) with 0 < low <= high")
        delay = self.actuator_delay_s
        if delay is not None and not (len(delay) == 2 and 0 <= delay[0] <= delay[1]):
            raise ValueError(f"DomainRandCfg.actuator_delay_s={delay!r}: use (low, high) seconds, 0 <= low <= high")
        if self.action_delay_steps < 0 or self.action_noise_std < 0:
            raise ValueError("DomainRandCfg: action_delay_steps and action_noise_std must be >= 0")
        interval, push = self.push_interval_s, self.push_velocity
        if interval is not None and not (len(interval) == 2 and all(math.isfinite(x) for x in interval)
                                         and 0 < interval[0] <= interval[1]):
            raise ValueError(f"DomainRandCfg.push_interval_s={interval!r}: use (low, high) seconds, 0 < low <= high")
        if isinstance(push, bool) or not isinstance(push, int | float) or not math.isfinite(push) or push < 0:
            raise ValueError(f"DomainRandCfg.push_velocity={push!r}: use a finite speed >= 0 (m/s)")
        if (interval is None) != (push == 0):
            raise ValueError(f"DomainRandCfg.push_interval_s={interval!r} with push_velocity={push!r}: set both "
                             "(pushes on, e.g. (5.0, 8.0) and 0.5) or neither (pushes off)")


def actuator_history_edit(cfg: DomainRandCfg, physics_dt: float):
    """A spec edit giving every actuator a history long enough for ``cfg.actuator_delay_s``, or None."""
    if cfg.actuator_delay_s is None:
        return None
    samples = math.ceil(cfg.actuator_delay_s[1] / physics_dt) + 2

    def edit(spec: mujoco.MjSpec) -> None:
        for actuator in spec.actuators:
            actuator.nsample = samples
            actuator.delay = cfg.actuator_delay_s[1]

    return edit


EPISODE_DRAWS = ("geom_friction", "body_mass", "actuator_gain", "actuator_bias", "actuator_delay", "action_delay")
"""The keys of :meth:`DomainRandomizer.capture` drawn at a reset and fixed for the episode (what a recording
stores to replay it); ``action_history`` (the delayed actions in flight) is empty at an episode's start."""


class DomainRandomizer:
    """Applies a :class:`DomainRandCfg` to a backend exposing ``expand``/``set_const``."""

    def __init__(self, cfg: DomainRandCfg, backend, generator: torch.Generator, control_dt: float = 0.0,
                 base_body: str | None = None) -> None:
        self.cfg = cfg
        self.backend = backend
        self.generator = generator
        self.device = backend.device
        n = backend.num_envs
        model: mujoco.MjModel = backend.model
        self._fields: dict[str, tuple[np.ndarray, np.ndarray, Range]] = {}
        if cfg.friction_scale:
            self._add("geom_friction", cfg.friction_scale, (slice(None), 0))
        if cfg.mass_scale:
            self._add("body_mass", cfg.mass_scale, (slice(None),))
        if cfg.actuator_gain_scale:
            positional = model.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE
            self._gain_rows = np.nonzero(positional)[0]
            self._gain0 = model.actuator_gainprm[:, 0].copy()
            self._bias0 = model.actuator_biasprm[:, :3].copy()
        self._delay = torch.zeros(n, dtype=torch.long, device=self.device)
        self._history = torch.zeros(cfg.action_delay_steps + 1, n, model.nu, device=self.device)
        self._push_left = torch.zeros(n, dtype=torch.long, device=self.device)
        if cfg.push_interval_s:
            self._push_dofs = base_planar_dofs(model, base_body)
            if control_dt <= 0:
                raise ValueError(f"DomainRandomizer: push_interval_s needs the control period, got {control_dt=}")
            low, high = (max(1, round(s / control_dt)) for s in cfg.push_interval_s)
            self._push_steps = (low, high)

    def _add(self, field: str, scale: Range, index: tuple) -> None:
        live = self.backend.expand(field)
        self._fields[field] = (live, np.array(live[(0, *index)], copy=True), scale)

    def _scales(self, n: int, scale: Range, shape: tuple[int, ...] = ()) -> np.ndarray:
        u = torch.rand((n, *shape), generator=self.generator, device=self.device).cpu().numpy()
        return scale[0] + (scale[1] - scale[0]) * u

    def reset(self, ids: torch.Tensor) -> None:
        """Resample the physics fields and latency of envs ``ids``; clear their action history."""
        ids_np = ids.cpu().numpy()
        n = len(ids_np)
        if "geom_friction" in self._fields:
            live, nominal, scale = self._fields["geom_friction"]
            live[ids_np, :, 0] = nominal * self._scales(n, scale, (1,))
        if "body_mass" in self._fields:
            live, nominal, scale = self._fields["body_mass"]
            live[ids_np] = nominal * self._scales(n, scale, (1,))
            self.backend.set_const(ids_np)
        if self.cfg.actuator_gain_scale:
            gain = self.backend.expand("actuator_gainprm")
            bias = self.backend.expand("actuator_biasprm")
            k = self._scales(n, self.cfg.actuator_gain_scale, (1,))
            rows = self._gain_rows
            gain[np.ix_(ids_np, rows, [0])] = (self._gain0[rows] * k)[..., None]
            bias[np.ix_(ids_np, rows, [1, 2])] = self._bias0[rows][None, :, 1:3] * k[..., None]
        if self.cfg.actuator_delay_s:
            low, high = self.cfg.actuator_delay_s
            self.backend.expand("actuator_delay")[ids_np] = self._scales(n, (low, high), (1,))
        if self.cfg.action_delay_steps:
            high = self.cfg.action_delay_steps + 1
            self._delay[ids] = torch.randint(0, high, (n,), generator=self.generator, device=self.device)
        self._history[:, ids] = 0.0
        if self.cfg.push_interval_s:
            self._push_left[ids] = self._draw_push_steps(n)

    def _draw_push_steps(self, n: int) -> torch.Tensor:
        """``[n]`` int64 control steps until the next push, uniform in ``push_interval_s`` (whole steps)."""
        low, high = self._push_steps
        return torch.randint(low, high + 1, (n,), generator=self.generator, device=self.device)

    def push(self) -> torch.Tensor | None:
        """Count down every env's push timer; push the envs whose timer ran out (and redraw their timers).

        Returns:
            ``[N, 2]`` planar velocity (m/s, world x and y) added to each env's base this step (zero rows for
            envs not pushed), or None when pushes are off.
        """
        if not self.cfg.push_interval_s:
            return None
        self._push_left -= 1
        due = (self._push_left <= 0).nonzero().squeeze(1)
        delta = torch.zeros(self.backend.num_envs, 2, device=self.device)
        if len(due):
            u = torch.rand((len(due), 2), generator=self.generator, device=self.device)
            delta[due] = (2.0 * u - 1.0) * self.cfg.push_velocity
            self._push_left[due] = self._draw_push_steps(len(due))
            self.backend.add_qvel(due.cpu().numpy(), self._push_dofs, delta[due])
        return delta

    @property
    def push_timer(self) -> torch.Tensor:
        """``[N]`` int64 control steps until each env's next push (pushes on); writable per index."""
        return self._push_left

    @property
    def action_delay(self) -> torch.Tensor:
        """``[N]`` int64 latency of each env in control steps (``action_delay_steps``); writable per index."""
        return self._delay

    def capture(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the per-env draws of envs ``ids`` (only what ``cfg`` randomises), ``[n, ...]`` each:

        ``geom_friction [n, ngeom]``, ``body_mass [n, nbody]``, ``actuator_gain [n, nu]`` (kp),
        ``actuator_bias [n, 2 nu]`` (-kp, -kd), ``actuator_delay [n, nu]`` (s), float64;
        ``action_delay [n, 1]`` int64 (control steps) and ``action_history [n, D + 1, nu]`` float32
        (the delayed actions in flight); ``push_timer [n, 1]`` int64 (steps to the next push).
        """
        cfg, out = self.cfg, {}
        if cfg.friction_scale:
            out["geom_friction"] = np.array(self.backend.expand("geom_friction")[ids, :, 0], dtype=np.float64)
        if cfg.mass_scale:
            out["body_mass"] = np.array(self.backend.expand("body_mass")[ids], dtype=np.float64)
        if cfg.actuator_gain_scale:
            out["actuator_gain"] = np.array(self.backend.expand("actuator_gainprm")[ids, :, 0], dtype=np.float64)
            bias = np.array(self.backend.expand("actuator_biasprm")[ids, :, 1:3], dtype=np.float64)
            out["actuator_bias"] = bias.reshape(len(ids), -1)
        if cfg.actuator_delay_s:
            out["actuator_delay"] = np.array(self.backend.expand("actuator_delay")[ids], dtype=np.float64)
        if cfg.action_delay_steps:
            index = torch.as_tensor(ids, device=self.device)
            out["action_delay"] = self._delay[index].cpu().numpy().astype(np.int64).reshape(-1, 1)
            out["action_history"] = self._history[:, index].transpose(0, 1).cpu().numpy()
        if cfg.push_interval_s:
            index = torch.as_tensor(ids, device=self.device)
            out["push_timer"] = self._push_left[index].cpu().numpy().astype(np.int64).reshape(-1, 1)
        return out

    def restore(self, ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Write draws of :meth:`capture` (``[n, ...]`` each, any subset of its keys) into envs ``ids``."""
        if "geom_friction" in values:
            self.backend.expand("geom_friction")[ids, :, 0] = values["geom_friction"]
        if "body_mass" in values:
            self.backend.expand("body_mass")[ids] = values["body_mass"]
            self.backend.set_const(ids)
        if "actuator_gain" in values:
            self.backend.expand("actuator_gainprm")[ids, :, 0] = values["actuator_gain"]
            bias = np.asarray(values["actuator_bias"]).reshape(len(ids), -1, 2)
            self.backend.expand("actuator_biasprm")[ids, :, 1:3] = bias
        if "actuator_delay" in values:
            self.backend.expand("actuator_delay")[ids] = values["actuator_delay"]
        index = torch.as_tensor(ids, device=self.device)
        if "action_delay" in values:  # copied: recorded rows may be read-only arrays
            delay = torch.tensor(np.array(values["action_delay"]).reshape(-1), device=self.device)
            self._delay[index] = delay.long()
        if "action_history" in values:
            history = torch.as_tensor(values["action_history"], dtype=torch.float32, device=self.device)
            self._history[:, index] = history.transpose(0, 1)
        if "push_timer" in values:
            self._push_left[index] = torch.tensor(np.array(values["push_timer"]).reshape(-1), device=self.device)

    def perturb_action(self, action: torch.Tensor) -> torch.Tensor:
        """The action the actuators receive: delayed by each env's latency, plus noise."""
        if self.cfg.action_noise_std:
            noise = torch.randn(action.shape, generator=self.generator, device=self.device)
            action = action + self.cfg.action_noise_std * noise
        if not self.cfg.action_delay_steps:
            return action
        self._history = torch.roll(self._history, 1, dims=0)
        self._history[0] = action
        return self._history[self._delay, torch.arange(action.shape[0], device=self.device)]


def base_planar_dofs(model: mujoco.MjModel, base_body: str | None) -> np.ndarray:
    """``[2]`` qvel indices of the world-frame x and y velocity of ``base_body``'s free joint (pushes)."""
    free = int(mujoco.mjtJoint.mjJNT_FREE)
    body = -1 if base_body is None else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, base_body)
    joints = [j for j in range(model.njnt) if model.jnt_bodyid[j] == body and int(model.jnt_type[j]) == free]
    if not joints:
        raise ValueError(f"DomainRandCfg.push_interval_s: pushes need a floating-base robot (robot.yaml "
                         f"model.base_body with a free joint); base_body={base_body!r} has none. Fix: set "
                         "push_interval_s to None for this robot")
    start = int(model.jnt_dofadr[joints[0]])
    return np.array([start, start + 1])
