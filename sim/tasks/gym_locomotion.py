"""Gymnasium's MuJoCo locomotion envs (v5) as batched tasks on the ``Batch`` backend.

``half_cheetah``, ``hopper``, ``walker2d``, ``ant`` and ``humanoid`` load gymnasium's own XML assets
and reproduce HalfCheetah-v5, Hopper-v5, Walker2d-v5, Ant-v5 and Humanoid-v5 with their default
arguments: the same ``frame_skip``, observation vector, reward terms and weights, healthy
termination, reset noise and 1000-step time limit (a truncation). From the same state and actions
the physics is bit-identical to gymnasium's, and observations/rewards agree to float32 rounding
(``tests/test_gym_locomotion.py`` checks this against gymnasium itself).

How the gymnasium semantics are kept on a ``Batch``:

- gymnasium calls ``mj_step(nstep=frame_skip)`` and reads the data as it is left: positions and
  velocities are post-step, but derived fields (``xpos``, ``xipos``, ``cinert``, ``cvel``,
  ``qfrc_actuator``) are those of the last substep's forward pass (for RK4, of its last stage).
  Ant's forward velocity uses the torso ``xpos`` and Humanoid's the centre of mass from ``xipos``,
  so these stale values matter. The env therefore steps with ``stage=mjSTAGE_NONE`` (no forward
  pass after the step; :class:`GymStepBackend`), which leaves exactly gymnasium's values.
- ``cfrc_ext`` (Ant and Humanoid observations and contact costs) is not computed by ``mj_step``;
  gymnasium runs ``mj_rnePostConstraint`` after it. ``Batch`` has no call for that (a force
  sensor would trigger it, but inside the first RK4 stage, on other contacts), so after each step
  the env copies each simulation's ``MjData`` out (``Batch.get_data``) and runs
  ``mj_rnePostConstraint`` on it: one Python call per env, measured at ~6-11 us per env against
  ~200-750 us of physics. Observations right after a reset carry zero contact forces, as
  gymnasium's do (``mj_resetData`` zeroes them and ``mj_forward`` does not compute them).

Differences from gymnasium, on purpose: actions are clipped to the actuator ``ctrlrange`` before
they are applied and charged (gymnasium charges the control cost on the unclipped action);
reset noise comes from the env's torch generator, not gymnasium's ``np_random``; observations
and rewards are float32 (computed in float64 first). The policy observation group is gymnasium's
observation vector, which holds simulator-only quantities: these tasks are for comparing agents
with published gymnasium numbers, not for deployment.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium
import mujoco
import numpy as np
import torch

from sim.backends.mujoco_batch import MujocoBatchBackend
from sim.tasks.gym_rewards import (
    HealthyRule,
    Range,
    clip_contact_forces,
    contact_cost,
    control_cost,
    forward_velocity,
    is_healthy,
    mass_center_xy,
)
from sim.vecenv import Obs, Step, VecEnv

ASSETS = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
"""gymnasium's MuJoCo XML files (found without importing ``gymnasium.envs.mujoco``, which loads GLFW)."""
INF = math.inf
ObsTermName = Literal["qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext"]


@dataclass
class GymLocomotionCfg:
    """One gymnasium v5 locomotion env; defaults of each field are gymnasium's defaults.

    Attributes:
        gym_id: the gymnasium id this task reproduces (documentation and tests).
        xml_file: asset in ``gymnasium/envs/mujoco/assets``.
        frame_skip: physics steps per env step.
        forward_position: what the forward velocity differentiates: ``root_x`` (``qpos[0]``),
            ``main_body_xy`` (``xpos`` of body 1) or ``mass_center`` (from ``xipos``).
        forward_reward_weight, ctrl_cost_weight, healthy_reward, contact_cost_weight: weights.
        contact_force_range: forces are clipped to it in the contact cost and observation (Ant).
        contact_cost_range: the contact cost is clipped to it (Humanoid).
        healthy: health rule; ``None``: always healthy (HalfCheetah).
        terminate_when_unhealthy: end the episode (terminated) when unhealthy.
        reset_noise_scale: ``qpos0 + U(-s, s)``; ``qvel`` noise is ``U(-s, s)`` or ``s * N(0, 1)``.
        qvel_noise: ``uniform`` or ``normal``.
        observation: observation terms in order.
        exclude_positions: leading ``qpos`` entries left out of the observation (x, or x and y).
        qvel_obs_clip: the observed ``qvel`` is clipped to ``[-c, c]`` (Hopper, Walker2d).
        max_episode_steps: time limit (truncation).
    """

    gym_id: str
    xml_file: str
    frame_skip: int
    forward_position: Literal["root_x", "main_body_xy", "mass_center"]
    forward_reward_weight: float
    ctrl_cost_weight: float
    reset_noise_scale: float
    qvel_noise: Literal["uniform", "normal"]
    exclude_positions: int
    observation: tuple[ObsTermName, ...] = ("qpos", "qvel")
    healthy_reward: float = 0.0
    healthy: HealthyRule | None = None
    terminate_when_unhealthy: bool = True
    contact_cost_weight: float = 0.0
    contact_force_range: Range = (-INF, INF)
    contact_cost_range: Range = (-INF, INF)
    qvel_obs_clip: float | None = None
    max_episode_steps: int = 1000

    @property
    def needs_contact_forces(self) -> bool:
        """Whether ``cfrc_ext`` is read (observation or contact cost)."""
        return "cfrc_ext" in self.observation or self.contact_cost_weight != 0.0


GYM_LOCOMOTION: dict[str, GymLocomotionCfg] = {
    "half_cheetah": GymLocomotionCfg(
        "HalfCheetah-v5", "half_cheetah.xml", 5, "root_x", forward_reward_weight=1.0, ctrl_cost_weight=0.1,
        reset_noise_scale=0.1, qvel_noise="normal", exclude_positions=1),
    "hopper": GymLocomotionCfg(
        "Hopper-v5", "hopper.xml", 4, "root_x", forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
        reset_noise_scale=5e-3, qvel_noise="uniform", exclude_positions=1, healthy_reward=1.0,
        healthy=HealthyRule(z_index=1, z_range=(0.7, INF), angle_range=(-0.2, 0.2), state_range=(-100.0, 100.0)),
        qvel_obs_clip=10.0),
    "walker2d": GymLocomotionCfg(
        "Walker2d-v5", "walker2d_v5.xml", 4, "root_x", forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
        reset_noise_scale=5e-3, qvel_noise="uniform", exclude_positions=1, healthy_reward=1.0,
        healthy=HealthyRule(z_index=1, z_range=(0.8, 2.0), angle_range=(-1.0, 1.0)), qvel_obs_clip=10.0),
    "ant": GymLocomotionCfg(
        "Ant-v5", "ant.xml", 5, "main_body_xy", forward_reward_weight=1.0, ctrl_cost_weight=0.5,
        reset_noise_scale=0.1, qvel_noise="normal", exclude_positions=2, observation=("qpos", "qvel", "cfrc_ext"),
        healthy_reward=1.0, healthy=HealthyRule(z_index=2, z_range=(0.2, 1.0), z_inclusive=True, require_finite=True),
        contact_cost_weight=5e-4, contact_force_range=(-1.0, 1.0)),
    "humanoid": GymLocomotionCfg(
        "Humanoid-v5", "humanoid.xml", 5, "mass_center", forward_reward_weight=1.25, ctrl_cost_weight=0.1,
        reset_noise_scale=1e-2, qvel_noise="uniform", exclude_positions=2,
        observation=("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext"), healthy_reward=5.0,
        healthy=HealthyRule(z_index=2, z_range=(1.0, 2.0)), contact_cost_weight=5e-7, contact_cost_range=(-INF, 10.0)),
}


class GymStepBackend(MujocoBatchBackend):
    """The ``Batch`` backend stepping as gymnasium's ``MujocoEnv.do_simulation`` does.

    ``step`` ends without a forward pass (``stage=mjSTAGE_NONE``), so derived fields describe the
    last substep's forward pass, exactly as gymnasium reads them after ``mj_step``. The physics
    is the same as the base backend's (a persistent batch runs the full ``mj_step`` next time).
    """

    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl`` ``[N, nu]`` (already in ``ctrlrange``) for ``decimation`` substeps."""
        self._ctrl[:] = ctrl.detach().to("cpu", torch.float64).numpy()
        self.batch.step(nstep=self.decimation, stage=mujoco.mjtStage.mjSTAGE_NONE)


class GymLocomotionEnv(VecEnv):
    """``num_envs`` copies of one gymnasium v5 locomotion env (see the module docstring).

    Args:
        cfg: the task.
        num_envs: number of parallel envs.
        device: torch device of the returned tensors.
        seed: seed of the reset noise.
        nthread: physics threads (0: all CPUs).
    """

    reward_groups = ("task",)

    def __init__(self, cfg: GymLocomotionCfg, num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int = 0, nthread: int = 0) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg = cfg
        self.has_success = False  # Gymnasium's locomotion envs score return only
        self.has_terminations = cfg.healthy is not None and cfg.terminate_when_unhealthy
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.model = mujoco.MjModel.from_xml_path(str(ASSETS / cfg.xml_file))
        self.dt = float(self.model.opt.timestep) * cfg.frame_skip
        self.max_episode_steps = cfg.max_episode_steps
        self.action_dim = self.model.nu
        ctrlrange = torch.as_tensor(self.model.actuator_ctrlrange, dtype=torch.float32)
        self.action_low = ctrlrange[:, 0].to(self.device)
        self.action_high = ctrlrange[:, 1].to(self.device)
        self._ctrl_low, self._ctrl_high = (torch.as_tensor(self.model.actuator_ctrlrange[:, i]) for i in (0, 1))
        joints = [self.model.joint(int(j)).name for j in self.model.actuator_trnid[:, 0]]
        self.backend = GymStepBackend(self.model, num_envs, joints, {}, [], cfg.frame_skip, "cpu", nthread)
        self._fields = {name: self.backend.batch.bind(name) for name in
                        ("qpos", "qvel", "xpos", "xipos", "cinert", "cvel", "qfrc_actuator")}
        self._cfrc_ext = np.zeros((num_envs, self.model.nbody, 6))
        self._scratch = mujoco.MjData(self.model) if cfg.needs_contact_forces else None
        self._body_mass = torch.as_tensor(self.model.body_mass, dtype=torch.float64)
        self.generator = torch.Generator().manual_seed(seed)
        self.episode_step = torch.zeros(num_envs, dtype=torch.long)
        self._episode_sums = {name: torch.zeros(num_envs, dtype=torch.float64) for name in self._term_names()}
        self._episode_return = torch.zeros(num_envs, dtype=torch.float64)
        self._reset_envs(torch.arange(num_envs))
        self.observation_layout = {"policy": [(name, self._field(name).shape[1], 1.0) for name in cfg.observation]}
        self.observation_dims = {"policy": sum(size for _, size, _ in self.observation_layout["policy"])}

    # ----------------------------------------------------------------------------- state
    def _term_names(self) -> list[str]:
        """Reward terms of this task, named as gymnasium's ``info["reward_*"]`` keys."""
        names = ["forward", "ctrl"]
        if self.cfg.healthy is not None:
            names.append("survive")
        if self.cfg.contact_cost_weight:
            names.append("contact")
        return names

    def _read(self, name: str) -> torch.Tensor:
        """``[N, ...]`` float64 copy of a bound MjData field."""
        return torch.tensor(self._fields[name])

    def _field(self, name: ObsTermName) -> torch.Tensor:
        """``[N, k]`` float64 value of one observation term, as gymnasium's ``_get_obs`` builds it."""
        cfg = self.cfg
        if name == "qpos":
            return self._read("qpos")[:, cfg.exclude_positions:]
        if name == "qvel":
            qvel = self._read("qvel")
            return qvel.clamp(-cfg.qvel_obs_clip, cfg.qvel_obs_clip) if cfg.qvel_obs_clip else qvel
        if name == "qfrc_actuator":
            return self._read("qfrc_actuator")[:, 6:]
        if name == "cfrc_ext":
            forces = clip_contact_forces(torch.from_numpy(self._cfrc_ext), cfg.contact_force_range)
            return forces[:, 1:].flatten(1)
        return self._read(name)[:, 1:].flatten(1)

    def _forward_position(self) -> torch.Tensor:
        """``[N, 2]`` (x, y) the forward velocity differentiates (y is 0 for planar robots)."""
        kind = self.cfg.forward_position
        if kind == "root_x":
            x = self._read("qpos")[:, 0]
            return torch.stack([x, torch.zeros_like(x)], dim=1)
        if kind == "main_body_xy":
            return self._read("xpos")[:, 1, :2]
        return mass_center_xy(self._body_mass, self._read("xipos"))

    def _update_contact_forces(self) -> None:
        """``cfrc_ext`` of every env as gymnasium computes it: ``mj_rnePostConstraint`` after the step."""
        data = self._scratch
        for i in range(self.num_envs):
            self.backend.batch.get_data(i, data)
            mujoco.mj_rnePostConstraint(self.model, data)
            self._cfrc_ext[i] = data.cfrc_ext

    def _observations(self) -> Obs:
        obs = torch.cat([self._field(name) for name in self.cfg.observation], dim=1)
        return {"policy": obs.to(self.device, torch.float32)}

    # ----------------------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env (see :class:`sim.vecenv.VecEnv`)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_envs(torch.arange(self.num_envs))
        return self._observations()

    def step(self, action: torch.Tensor) -> Step:
        """Advance all envs one gymnasium step (see :class:`sim.vecenv.VecEnv`)."""
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"action has shape {tuple(action.shape)}, expected ({self.num_envs}, {self.action_dim})")
        cfg = self.cfg
        ctrl = torch.clamp(action.detach().to("cpu", torch.float64), self._ctrl_low, self._ctrl_high)
        before = self._forward_position()
        self.backend.step(ctrl)
        self.episode_step += 1
        velocity = forward_velocity(before, self._forward_position(), self.dt)
        if cfg.needs_contact_forces:
            self._update_contact_forces()
        qpos, qvel = self._read("qpos"), self._read("qvel")
        healthy = is_healthy(qpos, qvel, cfg.healthy) if cfg.healthy else torch.ones(self.num_envs, dtype=torch.bool)

        terms64 = {"forward": cfg.forward_reward_weight * velocity[:, 0],
                   "ctrl": -control_cost(ctrl, cfg.ctrl_cost_weight)}
        if cfg.healthy is not None:
            terms64["survive"] = healthy.double() * cfg.healthy_reward
        if cfg.contact_cost_weight:
            terms64["contact"] = -contact_cost(torch.from_numpy(self._cfrc_ext), cfg.contact_cost_weight,
                                               cfg.contact_force_range, cfg.contact_cost_range)
        terms = {name: value.to(self.device, torch.float32) for name, value in terms64.items()}
        reward = torch.stack(list(terms.values()), dim=1).sum(dim=1)
        terminated_cpu = ~healthy if (cfg.healthy is not None and cfg.terminate_when_unhealthy) \
            else torch.zeros(self.num_envs, dtype=torch.bool)
        truncated_cpu = (self.episode_step >= self.max_episode_steps) & ~terminated_cpu
        for name, value in terms64.items():
            self._episode_sums[name] += value
        self._episode_return += sum(terms64.values())

        final_obs = self._observations()
        done_ids = (terminated_cpu | truncated_cpu).nonzero().squeeze(1)
        log: dict[str, float] = {}
        obs = final_obs
        if len(done_ids):
            log = self._episode_log(done_ids)
            self._reset_envs(done_ids)
            obs = self._observations()
        info = {
            "final_obs": final_obs,
            "reward_terms": terms,
            "reward_by_group": reward[:, None].clone(),
            "success": torch.zeros(self.num_envs, dtype=torch.bool, device=self.device),
            "log": log,
            "x_velocity": velocity[:, 0].to(self.device, torch.float32),
            "y_velocity": velocity[:, 1].to(self.device, torch.float32),
        }
        return Step(obs, reward, terminated_cpu.to(self.device), truncated_cpu.to(self.device), info)

    # ----------------------------------------------------------------------------- internals
    def _reset_envs(self, ids: torch.Tensor) -> None:
        """gymnasium's ``reset_model`` for envs ``ids``: ``qpos0`` and zero velocity, plus noise."""
        n, s = len(ids), self.cfg.reset_noise_scale
        qpos0 = torch.as_tensor(self.model.qpos0, dtype=torch.float64)
        qpos = qpos0 + s * (2.0 * torch.rand(n, self.model.nq, generator=self.generator, dtype=torch.float64) - 1.0)
        if self.cfg.qvel_noise == "normal":
            qvel = s * torch.randn(n, self.model.nv, generator=self.generator, dtype=torch.float64)
        else:
            qvel = s * (2.0 * torch.rand(n, self.model.nv, generator=self.generator, dtype=torch.float64) - 1.0)
        self.set_state(ids, qpos, qvel)

    def set_state(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put envs ``ids`` in state ``qpos`` ``[n, nq]``, ``qvel`` ``[n, nv]`` (gymnasium's ``set_state``).

        Starts a new episode for them: step counter, episode sums and contact forces are cleared.
        """
        ids_np = ids.cpu().numpy()
        self.backend.reset(ids_np, qpos.double(), qvel.double(), torch.zeros(len(ids_np), self.model.nu))
        self._cfrc_ext[ids_np] = 0.0
        self.episode_step[ids] = 0
        self._episode_return[ids] = 0.0
        for sums in self._episode_sums.values():
            sums[ids] = 0.0

    def _episode_log(self, ids: torch.Tensor) -> dict[str, float]:
        log = {"episode/return": self._episode_return[ids].mean().item(),
               "episode/length": self.episode_step[ids].double().mean().item()}
        for name, sums in self._episode_sums.items():
            log[f"episode_reward/{name}"] = sums[ids].mean().item()
        return log

    def render(self, env_index: int = 0, width: int = 320, height: int = 240, camera: str | int = -1) -> np.ndarray:
        """RGB frame ``[height, width, 3]`` uint8 of env ``env_index`` (see :mod:`sim.render`)."""
        from sim.render import render_frame

        model, data = self.backend.snapshot(env_index)
        return render_frame(model, data, width, height, camera)

    def close(self) -> None:
        """Close the renderer, if one was opened."""
        from sim.render import close_renderers

        close_renderers()


def make_gym_locomotion(task: str, num_envs: int = 1, device: str = "cpu", seed: int = 0, nthread: int = 0,
                        **overrides) -> GymLocomotionEnv:
    """Build ``task`` (a key of :data:`GYM_LOCOMOTION`) with :class:`GymLocomotionCfg` fields overridden.

    Raises:
        ValueError: an override that is not a field of :class:`GymLocomotionCfg`.
    """
    cfg = GYM_LOCOMOTION[task]
    fields = {f.name for f in dataclasses.fields(cfg)} - {"gym_id", "xml_file"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"task {task!r} has no setting {unknown[0]!r}; valid: {sorted(fields)}")
    return GymLocomotionEnv(dataclasses.replace(cfg, **overrides), num_envs=num_envs, device=device, seed=seed,
                            nthread=nthread)


def make_half_cheetah(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> GymLocomotionEnv:
    """Registry factory of half_cheetah (HalfCheetah-v5)."""
    return make_gym_locomotion("half_cheetah", num_envs, device, seed, **overrides)


def make_hopper(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> GymLocomotionEnv:
    """Registry factory of hopper (Hopper-v5)."""
    return make_gym_locomotion("hopper", num_envs, device, seed, **overrides)


def make_walker2d(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> GymLocomotionEnv:
    """Registry factory of walker2d (Walker2d-v5)."""
    return make_gym_locomotion("walker2d", num_envs, device, seed, **overrides)


def make_ant(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> GymLocomotionEnv:
    """Registry factory of ant (Ant-v5)."""
    return make_gym_locomotion("ant", num_envs, device, seed, **overrides)


def make_humanoid(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> GymLocomotionEnv:
    """Registry factory of humanoid (Humanoid-v5)."""
    return make_gym_locomotion("humanoid", num_envs, device, seed, **overrides)
