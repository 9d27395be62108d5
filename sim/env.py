"""TaskEnv: the VecEnv every MuJoCo task is, assembled from small term functions.

A task is a :class:`TaskCfg` (robot, scene edit, observation/reward/termination terms with their
weights, success, randomisation) plus, where it keeps commands or targets, a subclass with
``_reset_task(ids)`` / ``_pre_step()`` hooks. Terms are functions ``(env) -> Tensor[N]`` (or
``[N, k]`` for observations) that read ``env.state`` (a backend-neutral :class:`SimState`) and
the task's own buffers, so a GPU backend only has to fill the same state.

Step order: clip action -> noise and latency -> pushes -> PD targets (rate-limited if the task says)
-> physics (``decimation`` substeps) -> read state -> task update -> terminations, rewards, success
-> final observations -> reset done envs -> observations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sim.backends import make_backend
from sim.backends.base import SimBackend
from sim.control import override_control, rate_limit, split_rate_limit
from sim.errors import SimInputError
from sim.randomization import DomainRandomizer, actuator_history_edit
from sim.robots import RobotConfig, build_model, load_robot, site_name
from sim.state import SimSnapshot, SimState
from sim.task_cfg import ObsTerm, TaskCfg, TermFn, compose_edits
from sim.vecenv import Obs, Step, VecEnv


class TaskEnv(VecEnv):
    """A batched MuJoCo task on a simulation backend (``mujoco_batch`` on CPU, or ``mujoco_warp``).

    Args:
        cfg: the task.
        num_envs: number of parallel envs.
        device: torch device of every tensor the env returns.
        seed: seed of all task randomness (targets, noise, domain randomisation).
        nthread: physics threads of mujoco_batch (0: all CPUs).
        backend: ``mujoco_batch`` or ``mujoco_warp`` (see :mod:`sim.backends`).
    """

    task_buffers: tuple[str, ...] = ()
    """Attribute names of the task's own per-env tensors ``[N, ...]`` (targets, commands, timers):
    what :meth:`capture_state` saves beside the physics. A task that adds such a buffer lists it."""

    has_target: bool = False
    """Whether the task keeps a per-env target position (:meth:`get_target`, :meth:`set_target`)."""

    def __init__(self, cfg: TaskCfg, num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int = 0, nthread: int = 0, backend: str = "mujoco_batch") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg = cfg
        self.has_success = cfg.success is not None
        self.has_terminations = bool(cfg.terminations)
        self.max_step_change, robot_control = split_rate_limit(cfg.control)
        self.robot: RobotConfig = override_control(load_robot(cfg.robot), robot_control)
        if self.max_step_change is not None and self.robot.control.action_type == "joint_torque":
            raise SimInputError(f"task setting control.max_step_change = {self.max_step_change} limits joint "
                                f"targets, but {self.robot.name} is torque-controlled here: leave it out")
        self.num_envs = num_envs
        self.device = torch.device(device)
        history = actuator_history_edit(cfg.randomization, self.robot.control.physics_dt)
        self.model = build_model(self.robot, compose_edits(cfg.scene, history))
        control = self.robot.control
        self.dt = control.dt
        self.max_episode_steps = max(1, round(cfg.episode_s / self.dt))
        self.action_dim = self.robot.num_joints
        self.action_low = -torch.ones(self.action_dim, device=self.device)
        self.action_high = torch.ones(self.action_dim, device=self.device)
        sites = {role: self._site_mjcf_name(role) for role in cfg.sites}
        self.backend: SimBackend = make_backend(backend, self.model, num_envs, self.robot.joint_names, sites,
                                                list(cfg.bodies), control.decimation, self.device, nthread)
        joints = self.robot.joints
        self.default_joint_pos = torch.tensor([j.default for j in joints], device=self.device)
        self.joint_lower = torch.tensor([j.lower for j in joints], device=self.device)
        self.joint_upper = torch.tensor([j.upper for j in joints], device=self.device)
        self.joint_effort = torch.tensor([j.effort for j in joints], device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.randomizer = DomainRandomizer(cfg.randomization, self.backend, self.generator, control_dt=self.dt,
                                           base_body=self.robot.model.base_body)
        self.reward_groups = tuple(dict.fromkeys(t.group for t in cfg.rewards.values()))
        # [T, G] one-hot: reward_by_group = stacked reward terms [N, T] @ this, one matmul per step
        groups = [self.reward_groups.index(t.group) for t in cfg.rewards.values()]
        self._term_groups = torch.nn.functional.one_hot(torch.tensor(groups), len(self.reward_groups)).float()
        self._term_groups = self._term_groups.to(self.device)
        n = num_envs
        self.episode_step = torch.zeros(n, dtype=torch.long, device=self.device)
        self.action = torch.zeros(n, self.action_dim, device=self.device)
        self.last_action = torch.zeros_like(self.action)
        self.applied_ctrl = torch.zeros(n, self.action_dim, device=self.device)
        """``[N, A]`` the actuator command (ctrl) held since the last step: what a rate limit moves from."""
        self.previous_ctrl = torch.zeros_like(self.applied_ctrl)
        """``[N, A]`` the actuator command before the last step's (what that step's command moved from)."""
        self._episode_sums = {name: torch.zeros(n, device=self.device) for name in cfg.rewards}
        self._episode_return = torch.zeros(n, device=self.device)
        self._step_cache: dict[str, torch.Tensor] = {}
        self._read_state()
        self._init_task()
        self._reset_task(torch.arange(num_envs, device=self.device))
        self.observation_layout = {
            group: [(name, self._term_size(t), t.scale) for name, t in terms.items()]
            for group, terms in cfg.observations.items()
        }
        if "policy" not in self.observation_layout:
            raise ValueError("a task needs a 'policy' observation group")
        self.observation_dims = {g: sum(s for _, s, _ in terms) for g, terms in self.observation_layout.items()}
        # Each distinct term is evaluated once per observation, whichever groups use it.
        self._obs_terms: dict[str, tuple[TermFn, dict[str, Any]]] = {}
        self._obs_plan: dict[str, list[tuple[str, float]]] = {}
        for group, terms in cfg.observations.items():
            for term in terms.values():
                key = f"{term.func.__module__}.{term.func.__qualname__}{sorted(term.params.items())!r}"
                self._obs_terms[key] = (term.func, term.params)
                self._obs_plan.setdefault(group, []).append((key, term.scale))
        widths = [torch.full((size,), term.noise) for (_, size, _), term in
                  zip(self.observation_layout["policy"], cfg.observations["policy"].values(), strict=True)]
        noise = torch.cat(widths).to(self.device)
        self._policy_noise = noise if cfg.observation_noise and bool(noise.any()) else None
        size = cfg.image_size
        self.image_shapes: dict[str, tuple[int, int, int]] = {
            f"camera_{c}": (3, size, size) for c in cfg.cameras if cfg.camera_obs}
        """Camera observation groups (uint8 ``[N, 3, H, W]``, RGB), by group name; empty without cameras (or
        ``camera_obs`` off)."""
        self.cameras = cfg.cameras
        self.image_size = size if cfg.cameras else 0
        self._camera = None
        if cfg.cameras:
            from sim.render import CameraGroup  # GL only for a task built with cameras

            self._camera = CameraGroup(self.model, cfg.cameras, size, size)

    # ----------------------------------------------------------------------------- helpers
    def _read_state(self) -> None:
        self.state: SimState = self.backend.read()
        self._step_cache.clear()

    def cached(self, name: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``compute()`` once per state read: for quantities several terms derive from the state."""
        value = self._step_cache.get(name)
        if value is None:
            value = self._step_cache[name] = compute()
        return value

    def _site_mjcf_name(self, role: str) -> str:
        return site_name(self.robot, role) if role in self.robot.sites else role

    def _term_size(self, term: ObsTerm) -> int:
        return int(term.func(self, **term.params).shape[-1])

    def rand_uniform(self, low: Any, high: Any, shape: tuple[int, ...]) -> torch.Tensor:
        """Uniform samples in ``[low, high)`` from the env's seeded generator."""
        low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(high, dtype=torch.float32, device=self.device)
        u = torch.rand(shape, generator=self.generator, device=self.device)
        return low + (high - low) * u

    # ----------------------------------------------------------------------------- task hooks
    def _init_task(self) -> None:
        """Allocate the task's buffers (targets, commands); called once, before the first reset."""

    def _reset_task(self, ids: torch.Tensor) -> None:
        """Resample the task's targets/commands for envs ``ids`` (after their physics reset)."""

    def _pre_step(self) -> None:
        """Per-step task update (command resampling), after physics, before terms."""

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(qpos [n, nq], qvel [n, nv])`` for envs ``ids``: default pose plus noise."""
        n = len(ids)
        qpos = self.backend.default_qpos().repeat(n, 1)
        noise = self.cfg.init_joint_noise
        joint_pos = self.default_joint_pos + self.rand_uniform(-noise, noise, (n, self.action_dim))
        qpos[:, self.backend.joint_qpos_adr] = torch.clamp(joint_pos, self.joint_lower, self.joint_upper)
        return qpos, torch.zeros(n, self.model.nv, device=self.device)

    # ----------------------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env (see :class:`sim.vecenv.VecEnv`)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_envs(torch.arange(self.num_envs, device=self.device))
        self._read_state()
        return self._observations()

    def step(self, action: torch.Tensor) -> Step:
        """Advance all envs one control period (see :class:`sim.vecenv.VecEnv`)."""
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"action has shape {tuple(action.shape)}, expected "
                             f"({self.num_envs}, {self.action_dim})")
        self.last_action = self.action
        self.action = torch.clamp(action.to(self.device, torch.float32), self.action_low, self.action_high)
        applied = self.randomizer.perturb_action(self.action)
        self.randomizer.push()
        ctrl = self.actuator_command(applied)
        if self.max_step_change is not None:
            ctrl = rate_limit(ctrl, self.applied_ctrl, self.max_step_change)
        self.previous_ctrl, self.applied_ctrl = self.applied_ctrl, ctrl
        self.backend.step(ctrl)
        self.episode_step += 1
        self._read_state()
        self._pre_step()

        terms = {name: t.weight * t.func(self, **t.params) for name, t in self.cfg.rewards.items()}
        stacked = torch.stack(list(terms.values()), dim=1)
        by_group = stacked @ self._term_groups
        reward = stacked.sum(dim=1)
        success = self.cfg.success(self) if self.cfg.success else torch.zeros_like(reward, dtype=torch.bool)
        terminated = self._terminations()
        if self.cfg.success_terminates:
            terminated |= success
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        for name, value in terms.items():
            self._episode_sums[name] += value
        self._episode_return += reward

        final_obs = self._observations()
        done = terminated | truncated
        log: dict[str, float] = {}
        done_ids = done.nonzero().squeeze(1)
        if len(done_ids):
            log = self._episode_log(done_ids, success)
            self._reset_envs(done_ids)
            self._read_state()
            fresh = self._observations(images=final_obs, image_ids=done_ids)
            # Envs that did not reset keep final_obs (same state, same noise draw): their obs continues the
            # trajectory exactly. The fresh draw covers every env, so the random stream does not depend on
            # which envs reset.
            obs = {group: torch.where(done.view(-1, *[1] * (value.dim() - 1)), value, final_obs[group])
                   for group, value in fresh.items()}
        else:
            obs = final_obs
        info = {"final_obs": final_obs, "reward_terms": terms, "reward_by_group": by_group,
                "success": success, "log": log}
        return Step(obs, reward, terminated, truncated, info)

    # The raw-action <-> joint-target mapping below is sim's own copy of robot_rl.deploy.actions
    # (to_targets / to_raw with action_spec(robot.control)): sim never imports robot_rl. Its twin is
    # pinned equal by tests/test_action_maps.py.
    def _action_map(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(offset [A], scale [A])`` of ``target = offset + scale * action`` (position control)."""
        control = self.robot.control
        if control.action_type == "joint_position":
            return (self.joint_lower + self.joint_upper) / 2, (self.joint_upper - self.joint_lower) / 2
        return self.default_joint_pos, torch.full_like(self.default_joint_pos, control.action_scale)

    def requested_targets(self, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, A]`` joint targets (rad) ``action`` ``[N, A]`` (default: the last step's) asks for, before any clamp
        or rate limit (position control): what the policy node's safety layer receives."""
        if self.robot.control.action_type == "joint_torque":
            raise SimInputError(f"{self.robot.name} is torque-controlled here: its actions are torques, not joint "
                                "targets")
        offset, scale = self._action_map()
        return offset + scale * (self.action if action is None else action)

    def actuator_command(self, action: torch.Tensor) -> torch.Tensor:
        """MuJoCo ``ctrl`` ``[N, nu]`` for a policy action ``[N, A]`` in ``[-1, 1]`` (joint targets or torques)."""
        if self.robot.control.action_type == "joint_torque":
            return action * self.joint_effort
        return torch.clamp(self.requested_targets(action), self.joint_lower, self.joint_upper)

    def action_for_targets(self, target: torch.Tensor) -> torch.Tensor:
        """``[N, A]`` action in ``[-1, 1]`` whose joint targets are ``target`` ``[N, A]`` (rad; position control).

        The inverse of :meth:`actuator_command`, clipped to the action box (scripted experts, teleop).
        """
        if self.robot.control.action_type == "joint_torque":
            raise ValueError(f"{self.robot.name} is torque-controlled: joint targets have no action")
        offset, scale = self._action_map()
        return torch.clamp((target - offset) / scale, self.action_low, self.action_high)

    # ----------------------------------------------------------------------------- public state
    def _env_ids(self, env_ids: Any) -> np.ndarray:
        """``env_ids`` (None: all; sequence, array or tensor of indices) as an int64 array ``[n]``."""
        if env_ids is None:
            return np.arange(self.num_envs)
        ids = np.asarray(env_ids.cpu() if isinstance(env_ids, torch.Tensor) else env_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise SimInputError(f"env ids {ids.tolist()} out of range for num_envs={self.num_envs}")
        return ids

    def _per_env_buffers(self) -> dict[str, torch.Tensor]:
        """The live per-env tensors ``[N, ...]`` a snapshot holds, by name."""
        live = {"episode_step": self.episode_step, "action": self.action, "last_action": self.last_action,
                "applied_ctrl": self.applied_ctrl, "previous_ctrl": self.previous_ctrl,
                "episode_return": self._episode_return}
        live.update({f"episode_sum/{name}": sums for name, sums in self._episode_sums.items()})
        live.update({name: getattr(self, name) for name in self.task_buffers})
        return live

    def capture_state(self, env_ids: Any = None) -> SimSnapshot:
        """Copy of the state of envs ``env_ids`` (None: all): physics, per-env buffers, randomiser draws."""
        ids = self._env_ids(env_ids)
        index = torch.as_tensor(ids, device=self.device)
        return SimSnapshot(
            physics=self.backend.capture(ids),
            buffers={name: value[index].clone() for name, value in self._per_env_buffers().items()},
            randomization=self.randomizer.capture(ids),
        )

    def restore_state(self, snapshot: SimSnapshot, env_ids: Any = None) -> None:
        """Put envs ``env_ids`` (None: all; as many as ``snapshot`` holds) back in ``snapshot``'s state.

        ``env.state`` is reread; the next :meth:`step` continues from the restored envs.
        """
        ids = self._env_ids(env_ids)
        if snapshot.num_envs != len(ids):
            raise SimInputError(f"the snapshot holds {snapshot.num_envs} envs; restoring it into {len(ids)} env ids")
        nq, nv = self.model.nq, self.model.nv
        if snapshot.physics["qpos"].shape[1:] != (nq,) or snapshot.physics["qvel"].shape[1:] != (nv,):
            raise SimInputError(f"the snapshot's qpos/qvel have sizes {snapshot.physics['qpos'].shape[1:]}, "
                                f"{snapshot.physics['qvel'].shape[1:]}; this env's model needs ({nq},), ({nv},): "
                                "it was captured in another task or model")
        index = torch.as_tensor(ids, device=self.device)
        self.randomizer.restore(ids, snapshot.randomization)
        self.backend.restore(ids, snapshot.physics)
        live = self._per_env_buffers()
        for name, value in snapshot.buffers.items():
            live[name][index] = value.to(self.device)
        self._read_state()

    def score_state(self, qpos: Any, qvel: Any) -> torch.Tensor:
        """Score physics simulated outside this env (the ROS simulated robot) as one control step of the task.

        Every env takes ``qpos`` ``[N, nq]`` / ``qvel`` ``[N, nv]`` (kinematics recomputed, ``state`` reread),
        the task's per-step update runs (hold timers, as after physics in :meth:`step`) and the task's
        success ``[N]`` bool is returned. Episode counters and rewards are not touched.
        """
        if self.cfg.success is None:
            raise SimInputError(f"task {type(self).__name__} defines no success to score")
        self._load_state(qpos, qvel)
        self._pre_step()
        return self.cfg.success(self)

    def terminated_state(self, qpos: Any, qvel: Any) -> torch.Tensor:
        """``[N]`` bool: would physics simulated outside this env (``qpos [N, nq]``, ``qvel [N, nv]``) end an
        episode by one of the task's terminations (a fall)? Nothing else is touched; False without terminations."""
        self._load_state(qpos, qvel)
        return self._terminations()

    def _terminations(self) -> torch.Tensor:
        """``[N]`` bool: any of the task's terminations holds in the current state (success aside)."""
        ended = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        for func in self.cfg.terminations.values():
            ended |= func(self)
        return ended

    def _load_state(self, qpos: Any, qvel: Any) -> None:
        """Every env takes ``qpos`` / ``qvel`` (kinematics recomputed, ``state`` reread)."""
        ids = np.arange(self.num_envs)
        physics = self.backend.capture(ids)
        physics["qpos"][:] = np.asarray(qpos, dtype=np.float64)
        physics["qvel"][:] = np.asarray(qvel, dtype=np.float64)
        self.backend.restore(ids, physics)
        self._read_state()

    def term_value(self, name: str) -> torch.Tensor:
        """``[N, size]`` raw value (unscaled, noise-free) of observation term ``name`` of any group, now."""
        term = next((terms[name] for terms in self.cfg.observations.values() if name in terms), None)
        if term is None:
            known = sorted({n for terms in self.cfg.observations.values() for n in terms})
            raise SimInputError(f"task {type(self).__name__} has no observation term {name!r}; it has {known}")
        return term.func(self, **term.params)

    def joint_positions(self) -> torch.Tensor:
        """``[N, J]`` copy of the joint positions (robot.yaml order, noise-free; ``state.joint_pos``)."""
        return self.state.joint_pos.clone()

    @property
    def joint_qpos_index(self) -> torch.Tensor:
        """``[J]`` addresses of the robot's joints (robot.yaml order) in ``qpos`` (``SimSnapshot.physics``)."""
        return self.backend.joint_qpos_adr

    def jacobian(self, body: int, point: torch.Tensor, env_ids: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Translational and rotational Jacobians ``([n, 3, nv], [n, 3, nv])`` float64 of world points
        ``point`` ``[n, 3]`` fixed to body id ``body``, in envs ``env_ids`` (None: all), at the current state."""
        ids = None if env_ids is None else self._env_ids(env_ids)
        jacp, jacr = self.backend.jacobian(body, point.detach().cpu().double().numpy(), ids)
        return torch.from_numpy(jacp).to(self.device), torch.from_numpy(jacr).to(self.device)

    def _require_target(self) -> torch.Tensor:
        if not self.has_target:
            raise SimInputError(f"task {type(self).__name__} has no target")
        return self.target

    def get_target(self, env_ids: Any = None) -> torch.Tensor:
        """``[n, 3]`` copy of the target of envs ``env_ids`` (None: all), in the task's target frame."""
        return self._require_target()[torch.as_tensor(self._env_ids(env_ids), device=self.device)].clone()

    def set_target(self, target: torch.Tensor, env_ids: Any = None) -> None:
        """Give envs ``env_ids`` (None: all) the targets ``target`` ``[n, 3]`` (markers follow)."""
        index = torch.as_tensor(self._env_ids(env_ids), device=self.device)
        self._require_target()[index] = torch.as_tensor(target, dtype=torch.float32, device=self.device)
        self._target_changed(index)

    def target_distribution(self) -> torch.Tensor:
        """``[M, 3]`` the targets a reset draws from (uniformly), in the task's target frame."""
        self._require_target()
        return self.target_table.clone()

    def _target_changed(self, ids: torch.Tensor) -> None:
        """Hook after the targets of envs ``ids`` changed (move a marker)."""

    # ----------------------------------------------------------------------------- internals
    def _reset_envs(self, ids: torch.Tensor) -> None:
        self.randomizer.reset(ids)
        qpos, qvel = self._initial_state(ids)
        zero = torch.zeros(len(ids), self.action_dim, device=self.device)
        ctrl = self.actuator_command(zero) if self.robot.control.action_type != "joint_torque" else zero
        self.backend.reset(ids.cpu().numpy(), qpos, qvel, ctrl)
        self.applied_ctrl[ids] = ctrl
        self.previous_ctrl[ids] = ctrl
        self._reset_task(ids)
        self.episode_step[ids] = 0
        self.action[ids] = 0.0
        self.last_action[ids] = 0.0
        self._episode_return[ids] = 0.0
        for sums in self._episode_sums.values():
            sums[ids] = 0.0

    def _episode_log(self, ids: torch.Tensor, success: torch.Tensor) -> dict[str, float]:
        log = {
            "episode/return": self._episode_return[ids].mean().item(),
            "episode/length": self.episode_step[ids].float().mean().item(),
        }
        for name, sums in self._episode_sums.items():
            log[f"episode_reward/{name}"] = sums[ids].mean().item()
        if self.cfg.success is not None:
            log["episode/success"] = success[ids].float().mean().item()
        return log

    def _observations(self, images: Obs | None = None, image_ids: torch.Tensor | None = None) -> Obs:
        """Every observation group; camera groups are copied from ``images`` except envs ``image_ids``, re-rendered."""
        raw = {key: func(self, **params) for key, (func, params) in self._obs_terms.items()}
        out = {group: torch.cat([raw[key] * scale if scale != 1.0 else raw[key] for key, scale in plan], dim=1)
               for group, plan in self._obs_plan.items()}
        if self._policy_noise is not None:
            u = torch.rand(out["policy"].shape, generator=self.generator, device=self.device)
            out["policy"] = out["policy"] + (2.0 * u - 1.0) * self._policy_noise
        if self.image_shapes:
            out.update(self._render_cameras(images, image_ids))
        return out

    def camera_images(self, env_ids: Any = None) -> dict[str, torch.Tensor]:
        """``{camera: uint8 [n, 3, H, W]}`` of every camera of ``cameras``, rendered now for envs ``env_ids``
        (None: all), whether or not ``camera_obs`` puts them in the observations."""
        if self._camera is None:
            raise SimInputError(f"task {type(self).__name__} renders no camera; set cameras, e.g. [front]")
        index = self._env_ids(env_ids)
        physics = self.backend.capture(index)
        frames = self._camera.render(physics["qpos"], physics["mocap_pos"], physics["mocap_quat"])
        return {name: torch.from_numpy(image).to(self.device) for name, image in frames.items()}

    def world_cameras(self) -> tuple[str, ...]:
        """The model's world-fixed cameras (:func:`sim.render.world_cameras`), whether or not ``cameras`` renders
        them."""
        from sim.render import world_cameras

        return world_cameras(self.model)

    def image_position(self, points: torch.Tensor, camera: str) -> torch.Tensor:
        """``[n, 2]`` image positions of world points ``[n, 3]`` in world camera ``camera``
        (:func:`sim.render.image_position`: x right, y down, [-1, 1] in the frame of a square image)."""
        from sim.render import image_position

        where = image_position(self.model, camera, torch.as_tensor(points).detach().cpu().numpy())
        return torch.from_numpy(where).float()

    def site_positions(self, joint_positions: torch.Tensor, role: str) -> torch.Tensor:
        """``[n, 3]`` world positions of site ``role`` (``end_effector``, or an MJCF site name) with the robot's joints
        at ``joint_positions [n, J]`` (robot.yaml order, e.g. a dataset's ``observation.state``), by forward kinematics
        on the task's model; every other coordinate (a floating base, objects) at the model's default ``qpos0``."""
        import mujoco

        joints = torch.as_tensor(joint_positions, dtype=torch.float64).detach().cpu().numpy()
        if joints.ndim != 2 or joints.shape[1] != len(self.robot.joint_names):
            raise SimInputError(f"joint_positions has shape {tuple(joints.shape)}: expected [n, "
                                f"{len(self.robot.joint_names)}] in the order {list(self.robot.joint_names)}")
        site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, self._site_mjcf_name(role))
        if site < 0:
            raise SimInputError(f"site {role!r} is not in the task's model")
        data = mujoco.MjData(self.model)
        address = self.backend.joint_qpos_adr.cpu().numpy()
        out = np.empty((len(joints), 3))
        for i, q in enumerate(joints):
            data.qpos[:] = self.model.qpos0
            data.qpos[address] = q
            mujoco.mj_kinematics(self.model, data)
            out[i] = data.site_xpos[site]
        return torch.from_numpy(out).float()

    def _render_cameras(self, images: Obs | None, ids: torch.Tensor | None) -> Obs:
        """``{"camera_<name>": uint8 [N, 3, H, W]}``: envs ``ids`` (None: all) rendered, the rest from ``images``."""
        index = self._env_ids(ids)
        frames = self.camera_images(index)
        out = {}
        for name, shape in self.image_shapes.items():
            full = images[name].clone() if images is not None else \
                torch.empty(self.num_envs, *shape, dtype=torch.uint8, device=self.device)
            full[torch.as_tensor(index, device=self.device)] = frames[name[len("camera_"):]]
            out[name] = full
        return out

    def render(self, env_index: int = 0, width: int = 320, height: int = 240,
               camera: str | int = -1) -> np.ndarray:
        """RGB frame ``[height, width, 3]`` uint8 of env ``env_index`` (see :mod:`sim.render`)."""
        from sim.render import render_frame

        model, data = self.mujoco_view(env_index)
        return render_frame(model, data, width, height, camera)

    def mujoco_view(self, env_index: int = 0) -> tuple[Any, Any]:
        """``(MjModel, MjData)`` of env ``env_index`` (its randomised fields, forward-computed), to render.

        The same pair is refilled on every call; copy them to keep one. Writing to them changes nothing.
        """
        return self.backend.snapshot(env_index)

    def close(self) -> None:
        """Close the renderers, if any were opened."""
        from sim.render import close_renderers

        if self._camera is not None:
            self._camera.close()
            self._camera = None
        close_renderers()
