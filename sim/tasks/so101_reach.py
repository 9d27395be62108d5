"""so101_reach: bring the SO-101 gripper site to a sampled 3-D target; success within 2 cm.

Targets are drawn from a table of gripper positions the arm actually reaches (forward kinematics
of random joint configurations within 90% of the policy's action range around the default pose,
kept where the site is above the floor and away from the base), so every target is feasible.
The target is given to the policy in the robot's base frame, as a ROS node would receive it from
a PoseStamped. :func:`reach_expert` is the task's scripted expert (``env.expert_action()``).
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from sim.env import TaskEnv
from sim.math import clip_norm, dls_step
from sim.randomization import DomainRandCfg
from sim.registry import make_task_env
from sim.robots import add_floor_and_light
from sim.task_cfg import ObsTerm, RewardTerm, TaskCfg
from sim.tasks import terms

TARGET_BODY = "target"
GRIPPER_BODY = "gripper"
"""The SO-101 body carrying the ``end_effector`` site (its Jacobian drives :func:`reach_expert`)."""


def add_target_marker(spec: mujoco.MjSpec) -> None:
    """Floor, light and a non-colliding mocap sphere that shows the target in renders."""
    add_floor_and_light(spec)
    body = spec.worldbody.add_body(name=TARGET_BODY, mocap=True, pos=[0.2, 0.0, 0.15])
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.012, 0, 0], rgba=[0.1, 0.9, 0.2, 0.6],
                  contype=0, conaffinity=0, group=2)


def reachable_configs(model: mujoco.MjModel, joint_names: list[str], lo: np.ndarray, hi: np.ndarray, site: str,
                      count: int, z_range: tuple[float, float], min_radius: float,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``([M, 3] positions of site, [M, J] joint configurations)`` over configurations uniform in ``[lo, hi]``,
    kept where the site is inside the workspace (height in ``z_range``, at least ``min_radius`` from the base
    axis)."""
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    site_id = model.site(site).id
    adr = [model.jnt_qposadr[model.joint(n).id] for n in joint_names]
    configs = rng.uniform(lo, hi, (count, len(adr)))
    points = []
    for q in configs:
        data.qpos[adr] = q
        mujoco.mj_kinematics(model, data)
        points.append(data.site_xpos[site_id].copy())
    points = np.array(points)
    radius = np.linalg.norm(points[:, :2], axis=1)
    keep = (points[:, 2] >= z_range[0]) & (points[:, 2] <= z_range[1]) & (radius >= min_radius)
    return points[keep], configs[keep]


def target_pos(env) -> torch.Tensor:
    """``[N, 3]`` target position in the robot base frame."""
    return env.target - env.state.site("base")


def ee_to_target(env) -> torch.Tensor:
    """``[N, 3]`` vector from the gripper site to the target (privileged)."""
    return env.target - env.state.site("end_effector")


def ee_distance(env) -> torch.Tensor:
    """``[N]`` gripper-to-target distance (m)."""
    return torch.linalg.norm(ee_to_target(env), dim=1)


def reach_kernel(env, std: float) -> torch.Tensor:
    """``[N]`` in (0, 1]: 1 - tanh(distance / std), dense near the target."""
    return 1.0 - torch.tanh(ee_distance(env) / std)


def reached(env) -> torch.Tensor:
    """``[N]`` bool: gripper within ``success_radius`` of the target."""
    return ee_distance(env) < env.cfg.params["success_radius"]


class ReachEnv(TaskEnv):
    """A reaching task: one target per env, drawn at every reset from a table of end-effector
    positions the policy's action range can command (shared by so101_reach and panda_reach).

    Params read: ``target_action_fraction`` (fraction of ``action_scale`` around the default pose
    the table's joint configurations span), ``target_table_size``, ``target_z_range``,
    ``target_min_radius``, and where a task declares it ``start_at_reach_fraction``: the fraction of
    resets that start the arm at rest at a random configuration of the same kind as the targets' (where
    a previous episode would have ended, as on a robot that is not reset between episodes) instead of
    the default pose.
    """

    target_joints = slice(None)
    """The joints that move the end-effector site (a gripper's jaw is left at its default)."""
    task_buffers = ("target",)
    has_target = True
    start_fraction = 0.0
    """``start_at_reach_fraction`` where the task declares it (set by :meth:`_init_task`)."""

    def _reachable(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`reachable_configs` over the ``target_joints`` box of the task's params."""
        p = self.cfg.params
        reach = p["target_action_fraction"] * self.robot.control.action_scale
        joints = self.target_joints
        lo = torch.maximum(self.joint_lower, self.default_joint_pos - reach)[joints].cpu().numpy()
        hi = torch.minimum(self.joint_upper, self.default_joint_pos + reach)[joints].cpu().numpy()
        return reachable_configs(self.model, self.robot.joint_names[joints], lo, hi,
                                 self._site_mjcf_name("end_effector"), p["target_table_size"],
                                 p["target_z_range"], p["target_min_radius"], seed)

    def _target_candidates(self) -> np.ndarray:
        """``[M, 3]`` candidate targets; subclasses may filter them further."""
        return self._reachable(seed=0)[0]

    def _init_task(self) -> None:
        table = self._target_candidates()
        self.target_table = torch.as_tensor(table, dtype=torch.float32, device=self.device)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self._mocap = int(self.model.body(TARGET_BODY).mocapid[0])
        self.start_fraction = float(self.cfg.params.get("start_at_reach_fraction", 0.0))
        if self.start_fraction > 0.0:  # [M, J] start configurations of the target joints, drawn apart from the targets
            self.start_table = torch.as_tensor(self._reachable(seed=1)[1], dtype=torch.float32, device=self.device)

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The default pose plus noise, or (``start_at_reach_fraction`` of the resets) a start configuration."""
        qpos, qvel = super()._initial_state(ids)
        if self.start_fraction > 0.0:
            moved = self.rand_uniform(0.0, 1.0, (len(ids),)) < self.start_fraction
            pick = torch.randint(0, len(self.start_table), (int(moved.sum()),), generator=self.generator,
                                 device=self.device)
            rows = torch.nonzero(moved).squeeze(1)
            qpos[rows.unsqueeze(1), self.backend.joint_qpos_adr[self.target_joints]] = self.start_table[pick]
        return qpos, qvel

    def _reset_task(self, ids: torch.Tensor) -> None:
        pick = torch.randint(0, len(self.target_table), (len(ids),), generator=self.generator, device=self.device)
        self.target[ids] = self.target_table[pick]
        self._target_changed(ids)

    def _target_changed(self, ids: torch.Tensor) -> None:
        self.backend.set_mocap_pos(ids.cpu().numpy(), self._mocap, self.target[ids])


class So101ReachEnv(ReachEnv):
    """SO-101 reaching; the gripper jaw (joint 6) does not move the gripper site."""

    target_joints = slice(0, 5)
    has_expert = True

    def expert_action(self) -> torch.Tensor:
        """``[N, 6]`` :func:`reach_expert`'s action."""
        return reach_expert(self)


def reach_expert(env: So101ReachEnv, max_step: float = 0.015, damping: float = 0.05,
                 target: torch.Tensor | None = None) -> torch.Tensor:
    """Move the SO-101 gripper site straight at the target (``target [N, 3]``, default ``env.target``) by
    damped-least-squares IK.

    Each control step asks for a Cartesian move of at most ``max_step`` metres towards the target and
    maps it to the five arm joints with the MuJoCo Jacobian of the gripper body at the site; the
    gripper joint holds its default. Reads the state, changes nothing.

    Returns:
        ``[num_envs, 6]`` actions in ``[-1, 1]``.
    """
    state = env.state
    site = state.site("end_effector")
    arm = env.robot.joint_names[:5]
    dofs = [int(env.model.joint(name).dofadr[0]) for name in arm]
    jacp, _ = env.jacobian(env.model.body(GRIPPER_BODY).id, site)
    q_target = state.joint_pos.clone()
    goal = env.target if target is None else target
    q_target[:, :5] += dls_step(jacp[:, :, dofs].float(), clip_norm(goal - site, max_step), damping)
    q_target[:, 5] = env.default_joint_pos[5]
    return env.action_for_targets(q_target)


def reach_observations() -> dict[str, dict[str, ObsTerm]]:
    """Policy (joints, target in the base frame, last action) and critic (+ gripper-to-target) groups."""
    policy = {
        "joint_pos": ObsTerm(terms.joint_pos, noise=0.01),
        "joint_vel": ObsTerm(terms.joint_vel, scale=0.1, noise=0.05),
        "target_pos": ObsTerm(target_pos),
        "last_action": ObsTerm(terms.last_action),
    }
    critic = {**policy, "ee_to_target": ObsTerm(ee_to_target)}
    critic = {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in critic.items()}
    return {"policy": policy, "critic": critic}


def reach_rewards() -> dict[str, RewardTerm]:
    """Distance, a fine tanh kernel near the target, action-rate and joint-velocity penalties, and the commands'
    excess over the deploy safety layer (weight 0: off here, ``task.env.rewards={command_excess: w}`` turns it on;
    :func:`sim.tasks.terms.command_excess`)."""
    return {
        "distance": RewardTerm(ee_distance, weight=-1.0),
        "reach_fine": RewardTerm(reach_kernel, weight=1.0, params={"std": 0.05}),
        "action_rate": RewardTerm(terms.action_rate_l2, weight=-0.01),
        "joint_vel": RewardTerm(terms.joint_vel_l2, weight=-0.001),
        "command_excess": RewardTerm(terms.command_excess, weight=0.0),
    }


def so101_reach_cfg() -> TaskCfg:
    """Default configuration of so101_reach."""
    return TaskCfg(
        robot="so101",
        episode_s=4.0,
        observations=reach_observations(),
        rewards=reach_rewards(),
        success=reached,
        scene=add_target_marker,
        sites=("end_effector", "base"),
        init_joint_noise=0.1,
        params={
            "success_radius": 0.02,
            "target_table_size": 4096,
            "target_z_range": (0.05, 0.35),
            "target_min_radius": 0.12,
            "target_action_fraction": 0.9,
            "start_at_reach_fraction": 0.0,
        },
    )


DEPLOY_START_AT_REACH_FRACTION = 0.5
"""Fraction of so101_reach_deploy's resets that start the arm at a reachable configuration rather than the default
pose: over ROS (and on a robot) an episode starts where the last one ended (sim2sim's episodes do)."""
DEPLOY_ACTUATOR_DELAY_S = (0.0, 0.012)
"""Command-to-motor delay range of so101_reach_deploy: 0 (an ideal bus) to the ROS loop's worst case
(``robot-rl deploy sim2sim --latency-ms 5``: about 1 ms state-to-command + 5 ms + one 4 ms physics step)."""
DEPLOY_SENSOR_NOISE = (0.002, 0.02)
"""Joint position (rad) and velocity (rad/s) noise std of the simulated robot node in sim2sim."""
DEPLOY_MAX_STEP_CHANGE = 0.1
"""Rad per policy step each joint target may move in so101_reach_deploy: hardware/so101/robot.yaml's
``safety.max_step_change``, what the policy node's safety layer allows (pinned equal by a test)."""
DEPLOY_COMMAND_EXCESS_WEIGHT = -0.3
"""so101_reach_deploy's ``command_excess`` weight: commands beyond the safety layer cost 0.3 per rad, so that the
policy asks for targets the robot follows as given (25% / 12% of commands rate-limited over ROS 2 for two seeds,
against 99% without it; docs/tasks.md "Commands the robot follows as given")."""


def so101_reach_deploy_cfg() -> TaskCfg:
    """so101_reach as the ROS 2 loop sees it: per-env actuator delay in ``DEPLOY_ACTUATOR_DELAY_S``, joint
    observation noise with the simulated robot node's std (uniform of the same std, after scaling),
    ``DEPLOY_START_AT_REACH_FRACTION`` of the episodes starting where a previous reach could have ended, the safety
    layer's rate limit on every command (``DEPLOY_MAX_STEP_CHANGE``) and ``command_excess`` weighted
    ``DEPLOY_COMMAND_EXCESS_WEIGHT``."""
    cfg = so101_reach_cfg()
    pos_std, vel_std = DEPLOY_SENSOR_NOISE
    policy = dict(cfg.observations["policy"])
    policy["joint_pos"] = ObsTerm(terms.joint_pos, noise=3**0.5 * pos_std)
    scale = policy["joint_vel"].scale
    policy["joint_vel"] = ObsTerm(terms.joint_vel, scale=scale, noise=3**0.5 * vel_std * scale)
    observations = {**cfg.observations, "policy": policy}
    rewards = {**cfg.rewards, "command_excess": RewardTerm(terms.command_excess, weight=DEPLOY_COMMAND_EXCESS_WEIGHT)}
    return cfg.replace(observations=observations, rewards=rewards,
                       randomization=DomainRandCfg(actuator_delay_s=DEPLOY_ACTUATOR_DELAY_S),
                       control={"max_step_change": DEPLOY_MAX_STEP_CHANGE},
                       params={"start_at_reach_fraction": DEPLOY_START_AT_REACH_FRACTION})


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> So101ReachEnv:
    """Registry factory of so101_reach."""
    return make_task_env(So101ReachEnv, so101_reach_cfg(), "so101_reach", num_envs, device, seed, **overrides)


def make_deploy(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> So101ReachEnv:
    """Registry factory of so101_reach_deploy (see :func:`so101_reach_deploy_cfg`)."""
    return make_task_env(So101ReachEnv, so101_reach_deploy_cfg(), "so101_reach_deploy", num_envs, device, seed,
                         **overrides)
