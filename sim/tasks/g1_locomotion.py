"""g1_stand and g1_walk: the Unitree G1 humanoid tracking a velocity command on flat ground.

PD position targets (``default + 0.25 * action``) at 50 Hz over 200 Hz physics, as robot.yaml says.
Every episode starts standing in the default pose with the base at the height where the lowest
collision geometry (the foot spheres) just touches the floor. A velocity command (vx, vy, yaw rate)
is drawn per env at reset and redrawn every ``command_resample_s``; a ``standing_fraction`` of draws
is the zero command. ``g1_stand`` is the same task with only the zero command, 10 s episodes and random
pushes (:data:`STAND_PUSH_INTERVAL_S`, :data:`STAND_PUSH_VELOCITY`): surviving them is its figure of merit.
``g1_stand_gait`` and ``g1_walk_gait`` add unitree_rl_gym's gait clock and actions of 1 rad per unit
(:func:`with_gait`, :data:`GAIT_ACTION_SCALE`).

Reward groups: ``locomotion`` (command tracking with exp kernels, feet air time, alive) and
``posture`` (tilt, base height, vertical and roll/pitch rates, default-pose deviation, action
rate, torques, joint limits). Feet are tracked through sites the scene edit adds at the centres of
the foot collision spheres; foot contact is a height proxy (see :mod:`sim.tasks.g1_terms`).
Episodes end when the base drops below ``fall_height`` or tilts past ``fall_tilt_cos``.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import torch

from sim.env import TaskEnv
from sim.randomization import DomainRandCfg
from sim.registry import make_task_env
from sim.robots import add_floor_and_light
from sim.task_cfg import ObsTerm, RewardTerm, TaskCfg
from sim.tasks import g1_terms, terms

ROBOT = "unitree_g1"
FOOT_BODIES = {"left_foot": "left_ankle_roll_link", "right_foot": "right_ankle_roll_link"}
FOOT_POINTS = 4
"""Collision spheres per G1 foot (heel and toe, inner and outer); the scene puts a site at each centre."""
FOOT_SITES = tuple(f"{foot}_{k}" for foot in FOOT_BODIES for k in range(FOOT_POINTS))
"""Foot sites, ``[left 0-3, right 0-3]``; foot terms reshape them to ``[N, 2, FOOT_POINTS]``."""
ARM_JOINTS = tuple(range(15, 29))
"""Indices (robot.yaml order) of the 14 arm joints; 0-11 are legs, 12-14 the waist."""
HIP_ROLL_YAW_WAIST = (1, 2, 7, 8, 12, 13, 14)
GAIT_ACTION_SCALE = 1.0
"""Radians per unit action in the gait tasks: each joint's target reaches +-1 rad from the default pose (the policy's
actions are clipped to [-1, 1]). robot.yaml's 0.25 (unitree_rl_gym's scale, whose actions are clipped at +-100, not 1)
bounds every joint to +-0.25 rad, too little for a step; docs/results/g1_stand.md measures both."""
STAND_PUSH_INTERVAL_S = (5.0, 8.0)
"""Seconds between pushes in g1_stand: one push per 10 s episode, at 5-8 s. legged_gym pushes every 15 s
(``push_interval_s``; unitree_rl_gym's G1: 5 s), Isaac Lab's G1 every 10-15 s; this is the issue's 5-8 s."""
STAND_PUSH_VELOCITY = 0.5
"""Largest push (m/s along each of world x and y) in g1_stand: Isaac Lab's G1 ``push_robot`` velocity
range (+-0.5 m/s); legged_gym's default ``max_push_vel_xy`` is 1.0 (unitree_rl_gym's G1: 1.5)."""


def add_floor_and_feet(spec: mujoco.MjSpec) -> None:
    """Scene edit: floor, light and a site at the centre of every foot collision sphere (contact proxy)."""
    add_floor_and_light(spec)
    for foot, body_name in FOOT_BODIES.items():
        body = spec.body(body_name)
        spheres = [g for g in body.geoms if g.type == mujoco.mjtGeom.mjGEOM_SPHERE]
        if len(spheres) != FOOT_POINTS:
            raise ValueError(f"{body_name} has {len(spheres)} collision spheres, the G1 foot model has "
                             f"{FOOT_POINTS}. Fix: use the 29-DoF G1 MJCF shipped in ROBOT_RL_ASSETS")
        for k, geom in enumerate(spheres):
            body.add_site(name=f"{foot}_{k}", pos=list(geom.pos))


def foot_sphere_radius(model: mujoco.MjModel) -> float:
    """Radius (m) of the G1's foot collision spheres (one value; the contact proxy subtracts it)."""
    bodies = {model.body(b).id for b in FOOT_BODIES.values()}
    radii = {float(model.geom_size[g, 0]) for g in range(model.ngeom)
             if model.geom_bodyid[g] in bodies and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE}
    if len(radii) != 1:
        raise ValueError(f"foot spheres have radii {sorted(radii)}; the contact proxy needs one radius")
    return radii.pop()


def geom_bottom(model: mujoco.MjModel, data: mujoco.MjData, geom: int) -> float:
    """World z (m) of the lowest point of ``geom`` (posed by ``data``); exact for MuJoCo's collision shapes.

    Meshes count by their lowest vertex (exact for the convex hulls MuJoCo collides).
    """
    kind = model.geom_type[geom]
    size = model.geom_size[geom]
    rot = data.geom_xmat[geom].reshape(3, 3)
    centre = data.geom_xpos[geom, 2]
    axis_z = abs(rot[2, 2])
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return float(centre - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return float(centre - size[1] * axis_z - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return float(centre - size[1] * axis_z - size[0] * math.sqrt(max(0.0, 1.0 - axis_z**2)))
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return float(centre - np.abs(rot[2]) @ size)
    if kind == mujoco.mjtGeom.mjGEOM_MESH:
        mesh = model.geom_dataid[geom]
        start = model.mesh_vertadr[mesh]
        verts = model.mesh_vert[start:start + model.mesh_vertnum[mesh]]
        return float(np.min(verts @ rot[2]) + centre)
    raise ValueError(f"geom_bottom: geom {geom} has type {mujoco.mjtGeom(kind).name}; supported are "
                     "sphere, capsule, cylinder, box and mesh. Fix: extend geom_bottom")


def standing_base_height(model: mujoco.MjModel, joint_names: list[str], joint_pos: list[float]) -> float:
    """Base height (m) at which the lowest colliding robot geom touches the floor in pose ``joint_pos``."""
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0
    data.qpos[2] = 0.0
    for name, q in zip(joint_names, joint_pos, strict=True):
        data.qpos[model.jnt_qposadr[model.joint(name).id]] = q
    mujoco.mj_kinematics(model, data)
    colliding = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0
                 and (model.geom_contype[g] != 0 or model.geom_conaffinity[g] != 0)]
    return -min(geom_bottom(model, data, g) for g in colliding)


def _check_command_params(params: dict) -> None:
    ranges = params["command_ranges"]
    if len(ranges) != 3 or any(len(r) != 2 or r[0] > r[1] for r in ranges):
        raise ValueError(f"command_ranges={ranges!r}: give three (low, high) pairs with low <= high, "
                         "for vx (m/s), vy (m/s) and yaw rate (rad/s)")
    if not 0.0 <= params["standing_fraction"] <= 1.0:
        raise ValueError(f"standing_fraction={params['standing_fraction']!r}: use a probability in [0, 1]")
    if params["command_resample_s"] <= 0:
        raise ValueError(f"command_resample_s={params['command_resample_s']!r}: use a period > 0 seconds")


class G1LocomotionEnv(TaskEnv):
    """G1 velocity tracking: keeps commands, foot contacts and air timers as ``[N, ...]`` buffers."""

    task_buffers = ("command", "_command_steps_left", "air_time", "foot_contact", "first_contact",
                    "touchdown_air_time")

    def _init_task(self) -> None:
        p = self.cfg.params
        n = self.num_envs
        _check_command_params(p)
        self.standing_height = standing_base_height(self.model, self.robot.joint_names,
                                                    [j.default for j in self.robot.joints])
        self.foot_radius = foot_sphere_radius(self.model)
        self.foot_site_index = torch.tensor([self.backend.site_index[s] for s in FOOT_SITES], device=self.device)
        self.command = torch.zeros(n, 3, device=self.device)
        self._command_low = torch.tensor([r[0] for r in p["command_ranges"]], device=self.device)
        self._command_high = torch.tensor([r[1] for r in p["command_ranges"]], device=self.device)
        self._resample_steps = max(1, round(p["command_resample_s"] / self.dt))
        self._command_steps_left = torch.zeros(n, dtype=torch.long, device=self.device)
        self.air_time = torch.zeros(n, len(g1_terms.FEET), device=self.device)
        self.foot_contact = torch.ones(n, len(g1_terms.FEET), dtype=torch.bool, device=self.device)
        self.first_contact = torch.zeros_like(self.foot_contact)
        self.touchdown_air_time = torch.zeros_like(self.air_time)

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super()._initial_state(ids)
        qpos[:, 2] = self.standing_height
        return qpos, qvel

    def render(self, env_index: int = 0, width: int = 320, height: int = 240,
               camera: str | int = -1) -> np.ndarray:
        """RGB frame ``[height, width, 3]`` uint8 of env ``env_index``; the free camera follows the pelvis."""
        from sim.render import render_frame  # OpenGL only when rendering

        model, data = self.backend.snapshot(env_index)
        return render_frame(model, data, width, height, camera, track_body=self.robot.model.base_body)

    def _sample_commands(self, ids: torch.Tensor) -> None:
        n = len(ids)
        command = self.rand_uniform(self._command_low, self._command_high, (n, 3))
        standing = self.rand_uniform(0.0, 1.0, (n,)) < self.cfg.params["standing_fraction"]
        self.command[ids] = torch.where(standing[:, None], torch.zeros_like(command), command)
        self._command_steps_left[ids] = self._resample_steps

    def _reset_task(self, ids: torch.Tensor) -> None:
        self._sample_commands(ids)
        self.air_time[ids] = 0.0
        self.foot_contact[ids] = True
        self.first_contact[ids] = False
        self.touchdown_air_time[ids] = 0.0

    def _pre_step(self) -> None:
        contact = g1_terms.foot_heights(self) < self.cfg.params["contact_height"]
        self.air_time, self.first_contact, self.touchdown_air_time = g1_terms.step_air_time(
            self.air_time, contact, self.dt)
        self.foot_contact = contact
        self._command_steps_left -= 1
        due = (self._command_steps_left <= 0).nonzero().squeeze(1)
        if len(due):
            self._sample_commands(due)


def fell(env) -> torch.Tensor:
    """``[N]`` bool: the base dropped below ``params["fall_height"]``."""
    return terms.base_below(env, env.cfg.params["fall_height"])


def tipped(env) -> torch.Tensor:
    """``[N]`` bool: the base tilted so far that cos(tilt) < ``params["fall_tilt_cos"]``."""
    return terms.base_tilted(env, env.cfg.params["fall_tilt_cos"])


def noise_free(group: dict[str, ObsTerm]) -> dict[str, ObsTerm]:
    """The same terms without observation noise (critic copies of policy terms)."""
    return {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in group.items()}


def policy_observations() -> dict[str, ObsTerm]:
    """What the real G1 publishes: IMU gyro and orientation, /cmd_vel, joint states, last action."""
    return {
        "base_ang_vel": ObsTerm(terms.base_ang_vel, scale=0.25, noise=0.05),
        "projected_gravity": ObsTerm(terms.projected_gravity, noise=0.05),
        "velocity_command": ObsTerm(g1_terms.velocity_command),
        "joint_pos": ObsTerm(terms.joint_pos, noise=0.01),
        "joint_vel": ObsTerm(terms.joint_vel, scale=0.05, noise=0.075),
        "last_action": ObsTerm(terms.last_action),
    }


def privileged_observations() -> dict[str, ObsTerm]:
    """Sim-only terms the critic adds: base velocity and height, foot heights, contacts, air time."""
    return {
        "base_lin_vel": ObsTerm(terms.base_lin_vel, scale=2.0),
        "base_height": ObsTerm(terms.base_height),
        "foot_heights": ObsTerm(g1_terms.foot_heights),
        "foot_contacts": ObsTerm(g1_terms.foot_contacts),
        "foot_air_time": ObsTerm(g1_terms.foot_air_time),
    }


def locomotion_rewards(group: str = "locomotion") -> dict[str, RewardTerm]:
    """Command tracking, feet air time and the alive bonus, counted in ``group``."""
    return {
        "track_lin_vel_xy": RewardTerm(g1_terms.track_lin_vel_xy, 1.0, group, {"sigma": 0.25}),
        "track_ang_vel_z": RewardTerm(g1_terms.track_ang_vel_z, 0.5, group, {"sigma": 0.25}),
        "feet_air_time": RewardTerm(g1_terms.feet_air_time, 1.0, group,
                                    {"threshold": 0.4, "min_command": 0.1}),
        "alive": RewardTerm(terms.alive, 0.15, group),
    }


def posture_rewards(group: str = "posture", pose_joints: tuple[int, ...] = HIP_ROLL_YAW_WAIST + ARM_JOINTS,
                    base_height: float = 0.78) -> dict[str, RewardTerm]:
    """Upright, height and smoothness regularisers, counted in ``group``; ``command_excess`` at weight 0 (a user
    turns it on to ask only for targets the deploy safety layer passes: docs/tasks.md)."""
    return {
        "tilt": RewardTerm(g1_terms.tilt_l2, -1.0, group),
        "base_height": RewardTerm(g1_terms.base_height_l2, -10.0, group, {"target": base_height}),
        "lin_vel_z": RewardTerm(g1_terms.lin_vel_z_l2, -0.2, group),
        "ang_vel_xy": RewardTerm(g1_terms.ang_vel_xy_l2, -0.05, group),
        "default_pose": RewardTerm(g1_terms.default_pose_l1, -0.1, group, {"joints": pose_joints}),
        "action_rate": RewardTerm(terms.action_rate_l2, -0.01, group),
        "joint_torque": RewardTerm(terms.joint_torque_l2, -1e-5, group),
        "joint_limits": RewardTerm(terms.joint_limit_margin, -1.0, group),
        "command_excess": RewardTerm(terms.command_excess, 0.0, group),  # off: task.env.rewards={command_excess: w}
    }


def gait_rewards(group: str = "locomotion") -> dict[str, RewardTerm]:
    """unitree_rl_gym's G1 gait terms: feet follow a 0.8 s alternating clock (stance 55%), swing 8 cm high."""
    return {
        "gait_contact": RewardTerm(g1_terms.gait_contact, 0.18, group, {"stance": 0.55}),
        "feet_swing_height": RewardTerm(g1_terms.feet_swing_height, -20.0, group, {"height": 0.08}),
    }


def with_gait(cfg: TaskCfg) -> TaskCfg:
    """``cfg`` stepping to a gait clock: ``gait_phase`` (sin, cos) in both observation groups + :func:`gait_rewards`,
    and actions of :data:`GAIT_ACTION_SCALE` rad.

    unitree_rl_gym's G1 recipe: the robot is paid to step (in place under the zero command), so a push meets
    a gait already under way instead of a standing pose that must invent a recovery step. At the budgets of
    docs/results/g1_stand.md the policies do not step; the action scale is what raised their survival.
    """
    clock = {"gait_phase": ObsTerm(terms.gait_phase)}
    observations = {group: {**obs, **clock} for group, obs in cfg.observations.items()}
    return cfg.replace(observations=observations, rewards={**cfg.rewards, **gait_rewards()},
                       control={**cfg.control, "action_scale": GAIT_ACTION_SCALE})


def g1_walk_cfg() -> TaskCfg:
    """Default configuration of g1_walk."""
    policy = policy_observations()
    return TaskCfg(
        robot=ROBOT,
        episode_s=20.0,
        observations={"policy": policy, "critic": {**noise_free(policy), **privileged_observations()}},
        rewards={**locomotion_rewards(), **posture_rewards()},
        terminations={"fall": fell, "tipped": tipped},
        scene=add_floor_and_feet,
        sites=FOOT_SITES,
        init_joint_noise=0.05,
        randomization=DomainRandCfg(friction_scale=(0.6, 1.25)),
        params={
            "command_ranges": ((-0.5, 1.0), (-0.3, 0.3), (-0.8, 0.8)),
            "command_resample_s": 5.0,
            "standing_fraction": 0.1,
            "contact_height": 0.0,
            "fall_height": 0.45,
            "fall_tilt_cos": 0.5,
        },
    )


def g1_stand_cfg() -> TaskCfg:
    """Default configuration of g1_stand: g1_walk with only the zero command, 10 s episodes and pushes."""
    walk = g1_walk_cfg()
    pushes = dataclasses.replace(walk.randomization, push_interval_s=STAND_PUSH_INTERVAL_S,
                                 push_velocity=STAND_PUSH_VELOCITY)
    return walk.replace(episode_s=10.0, randomization=pushes,
                        params={"command_ranges": ((0.0, 0.0),) * 3, "standing_fraction": 1.0})


def make_walk_gait(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> G1LocomotionEnv:
    """Registry factory of g1_walk_gait (g1_walk with :func:`with_gait`)."""
    return make_task_env(G1LocomotionEnv, with_gait(g1_walk_cfg()), "g1_walk_gait", num_envs, device, seed,
                         **overrides)


def make_stand_gait(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> G1LocomotionEnv:
    """Registry factory of g1_stand_gait (g1_stand with :func:`with_gait`)."""
    return make_task_env(G1LocomotionEnv, with_gait(g1_stand_cfg()), "g1_stand_gait", num_envs, device, seed,
                         **overrides)


def make_walk(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> G1LocomotionEnv:
    """Registry factory of g1_walk."""
    return make_task_env(G1LocomotionEnv, g1_walk_cfg(), "g1_walk", num_envs, device, seed, **overrides)


def make_stand(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> G1LocomotionEnv:
    """Registry factory of g1_stand."""
    return make_task_env(G1LocomotionEnv, g1_stand_cfg(), "g1_stand", num_envs, device, seed, **overrides)
