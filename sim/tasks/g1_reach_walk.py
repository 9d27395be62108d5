"""g1_reach_walk: the G1 walks on a velocity command while reaching a hand target with its right hand.

The multi-critic task: reward group ``locomotion`` (command tracking, air time, alive and the
posture regularisers of :mod:`sim.tasks.g1_locomotion`) and group ``manipulation`` (the right
hand's distance to the target). The target lives in the robot's base (pelvis) frame, as a ROS node
receives it on ``/hand_target``: it moves with the robot and is redrawn at reset and every
``target_resample_s``. Targets come from a table of right-hand positions the arm reaches
(forward kinematics of random right-arm configurations, kept in front of the torso), so every
target is feasible. Success: hand within ``success_radius`` of the target (does not end the episode).
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from sim.math import quat_rotate, quat_rotate_inverse
from sim.registry import make_task_env
from sim.task_cfg import ObsTerm, RewardTerm, TaskCfg
from sim.tasks import g1_locomotion as loco

TARGET_BODY = "hand_target"
RIGHT_ARM_JOINTS = tuple(range(22, 29))
"""Indices (robot.yaml order) of the 7 right-arm joints, shoulder pitch to wrist yaw."""


def add_scene(spec: mujoco.MjSpec) -> None:
    """Floor, light, foot sites and a non-colliding mocap sphere showing the hand target in renders."""
    loco.add_floor_and_feet(spec)
    body = spec.worldbody.add_body(name=TARGET_BODY, mocap=True, pos=[0.3, -0.2, 0.9])
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.03, 0, 0], rgba=[0.1, 0.9, 0.2, 0.6],
                  contype=0, conaffinity=0, group=2)


def arm_reach_table(model: mujoco.MjModel, joint_names: list[str], site: str, count: int,
                    seed: int = 0) -> np.ndarray:
    """``[count, 3]`` positions of ``site`` in the base frame over arm configurations uniform in the limits.

    Every other joint stays at the model's reference configuration; the base sits at ``qpos0``.
    """
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    ids = [model.joint(n).id for n in joint_names]
    adr = model.jnt_qposadr[ids]
    lo, hi = model.jnt_range[ids].T
    points = np.empty((count, 3))
    for k in range(count):
        data.qpos[adr] = rng.uniform(lo, hi)
        mujoco.mj_kinematics(model, data)
        points[k] = data.site(site).xpos
    return points - model.qpos0[0:3]


def in_box(points: np.ndarray, box: tuple[tuple[float, float], ...]) -> np.ndarray:
    """``[M]`` bool: rows of ``points`` ``[M, 3]`` inside the axis-aligned ``box`` ((lo, hi) per axis)."""
    lo = np.array([b[0] for b in box])
    hi = np.array([b[1] for b in box])
    return np.all((points >= lo) & (points <= hi), axis=1)


def hand_in_base(env) -> torch.Tensor:
    """``[N, 3]`` right-hand site position in the base (pelvis) frame."""
    offset = env.state.site("right_hand") - env.state.qpos[:, 0:3]
    return quat_rotate_inverse(env.state.qpos[:, 3:7], offset)


def target_pos(env) -> torch.Tensor:
    """``[N, 3]`` hand target in the base frame (the PoseStamped on /hand_target)."""
    return env.target


def hand_to_target(env) -> torch.Tensor:
    """``[N, 3]`` vector from the right hand to the target, base frame (privileged)."""
    return env.target - hand_in_base(env)


def hand_distance(env) -> torch.Tensor:
    """``[N]`` right-hand to target distance (m)."""
    return torch.linalg.norm(hand_to_target(env), dim=1)


def reach_kernel(env, std: float) -> torch.Tensor:
    """``[N]`` in (0, 1]: ``1 - tanh(distance / std)``."""
    return 1.0 - torch.tanh(hand_distance(env) / std)


def reached(env) -> torch.Tensor:
    """``[N]`` bool: right hand within ``params["success_radius"]`` of the target."""
    return hand_distance(env) < env.cfg.params["success_radius"]


class G1ReachWalkEnv(loco.G1LocomotionEnv):
    """G1 velocity tracking plus a base-frame right-hand target redrawn every ``target_resample_s``."""

    task_buffers = (*loco.G1LocomotionEnv.task_buffers, "target", "_target_steps_left")
    has_target = True

    def _init_task(self) -> None:
        super()._init_task()
        p = self.cfg.params
        arm = [self.robot.joint_names[i] for i in RIGHT_ARM_JOINTS]
        local = arm_reach_table(self.model, arm, self._site_mjcf_name("right_hand"), p["target_table_size"])
        keep = in_box(local, p["target_box"])
        if keep.sum() < 16:
            raise ValueError(f"target_box={p['target_box']!r} keeps {int(keep.sum())} of "
                             f"{len(local)} reachable right-hand points; widen it (base frame, metres)")
        self.target_table = torch.as_tensor(local[keep], dtype=torch.float32, device=self.device)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self._target_steps = max(1, round(p["target_resample_s"] / self.dt))
        self._target_steps_left = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._mocap = int(self.model.body(TARGET_BODY).mocapid[0])

    def _sample_targets(self, ids: torch.Tensor) -> None:
        pick = torch.randint(0, len(self.target_table), (len(ids),), generator=self.generator, device=self.device)
        self.target[ids] = self.target_table[pick]
        self._target_steps_left[ids] = self._target_steps

    def _reset_task(self, ids: torch.Tensor) -> None:
        super()._reset_task(ids)
        self._sample_targets(ids)

    def _pre_step(self) -> None:
        super()._pre_step()
        self._target_steps_left -= 1
        due = (self._target_steps_left <= 0).nonzero().squeeze(1)
        if len(due):
            self._sample_targets(due)

    def render(self, env_index: int = 0, width: int = 320, height: int = 240,
               camera: str | int = -1) -> np.ndarray:
        """RGB frame ``[height, width, 3]`` uint8 of env ``env_index``, the target marker moved to the target."""
        i = slice(env_index, env_index + 1)
        world = self.state.qpos[i, 0:3] + quat_rotate(self.state.qpos[i, 3:7], self.target[i])
        self.backend.set_mocap_pos(np.array([env_index]), self._mocap, world)
        return super().render(env_index, width, height, camera)


def g1_reach_walk_cfg() -> TaskCfg:
    """Default configuration of g1_reach_walk."""
    policy = {**loco.policy_observations(), "target_pos": ObsTerm(target_pos)}
    critic = {**loco.noise_free(policy), **loco.privileged_observations(),
              "hand_to_target": ObsTerm(hand_to_target)}
    pose_joints = tuple(i for i in loco.HIP_ROLL_YAW_WAIST + loco.ARM_JOINTS if i not in RIGHT_ARM_JOINTS)
    manipulation = {
        "reach_coarse": RewardTerm(reach_kernel, 1.0, "manipulation", {"std": 0.2}),
        "reach_fine": RewardTerm(reach_kernel, 1.0, "manipulation", {"std": 0.05}),
    }
    walk = loco.g1_walk_cfg()
    return walk.replace(
        observations={"policy": policy, "critic": critic},
        rewards={**loco.locomotion_rewards("locomotion"),
                 **loco.posture_rewards("locomotion", pose_joints=pose_joints), **manipulation},
        success=reached,
        scene=add_scene,
        sites=(*loco.FOOT_SITES, "right_hand"),
        params={
            "command_ranges": ((-0.3, 0.6), (-0.2, 0.2), (-0.5, 0.5)),
            "standing_fraction": 0.25,
            "target_table_size": 4096,
            "target_box": ((0.15, 0.55), (-0.5, 0.05), (-0.1, 0.45)),
            "target_resample_s": 4.0,
            "success_radius": 0.05,
        },
    )


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> G1ReachWalkEnv:
    """Registry factory of g1_reach_walk."""
    return make_task_env(G1ReachWalkEnv, g1_reach_walk_cfg(), "g1_reach_walk", num_envs, device, seed, **overrides)
