"""panda_reach: bring the Franka Panda's ``pinch`` site to a sampled 3-D target; success within 2 cm.

The second arm family beside the SO-101. Position-controlled by default (PD targets around the
default pose, as robot.yaml says); ``make(torque=True)`` (task ``panda_reach_torque``) overrides
the action type to ``joint_torque``: the action times each joint's effort limit is the joint
torque. On either variant the arm's bodies are gravity-compensated, as the real Panda's
controller is (libfranka adds gravity compensation to every command), so a zero action holds
the pose in torque mode as it does on the robot.

Targets come from a table of pinch positions the arm reaches (forward kinematics of random
joint configurations), kept inside a box in front of the robot, so every target is feasible.
"""

from __future__ import annotations

import mujoco
import torch

from sim.env import ObsTerm, RewardTerm, TaskCfg, TaskEnv
from sim.registry import make_task_env
from sim.tasks import terms
from sim.tasks.so101_reach import (
    TARGET_BODY,
    add_target_marker,
    ee_distance,
    ee_to_target,
    reach_kernel,
    reachable_points,
    reached,
    target_pos,
)

ROBOT_ROOT_BODY = "link0"
BASE_SITE = "base"
"""Site at the origin of ``link0`` (ROS frame ``panda_link0``): targets are given in this frame."""


def add_scene(spec: mujoco.MjSpec) -> None:
    """Floor, light, target marker, a ``base`` site at ``panda_link0`` and gravity compensation."""
    add_target_marker(spec)
    root = spec.body(ROBOT_ROOT_BODY)
    root.add_site(name=BASE_SITE)
    for body in [root, *root.find_all(mujoco.mjtObj.mjOBJ_BODY)]:
        body.gravcomp = 1.0


class PandaReachEnv(TaskEnv):
    """Panda reaching with targets resampled at every reset."""

    def _init_task(self) -> None:
        p = self.cfg.params
        # Targets come from joint configurations the policy's action range can command.
        reach = 0.9 * self.robot.control.action_scale
        lo = torch.maximum(self.joint_lower, self.default_joint_pos - reach).cpu().numpy()
        hi = torch.minimum(self.joint_upper, self.default_joint_pos + reach).cpu().numpy()
        table = reachable_points(self.model, self.robot.joint_names, lo, hi, self._site_mjcf_name("end_effector"),
                                 p["target_table_size"], p["target_z_range"], p["target_min_radius"])
        (x_lo, x_hi), y_max = p["target_x_range"], p["target_y_max"]
        keep = (table[:, 0] >= x_lo) & (table[:, 0] <= x_hi) & (abs(table[:, 1]) <= y_max)
        if not keep.any():
            raise ValueError(f"panda_reach: no reachable target inside x {p['target_x_range']}, |y| <= {y_max}, "
                             f"z {p['target_z_range']}; widen the ranges")
        self.target_table = torch.as_tensor(table[keep], dtype=torch.float32, device=self.device)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self._mocap = int(self.model.body(TARGET_BODY).mocapid[0])

    def _reset_task(self, ids: torch.Tensor) -> None:
        pick = torch.randint(0, len(self.target_table), (len(ids),), generator=self.generator, device=self.device)
        self.target[ids] = self.target_table[pick]
        self.backend.set_mocap_pos(ids.cpu().numpy(), self._mocap, self.target[ids])


def panda_reach_cfg(torque: bool = False) -> TaskCfg:
    """Default configuration of panda_reach; ``torque=True`` gives joint-torque actions."""
    policy = {
        "joint_pos": ObsTerm(terms.joint_pos, noise=0.01),
        "joint_vel": ObsTerm(terms.joint_vel, scale=0.1, noise=0.05),
        "target_pos": ObsTerm(target_pos),
        "last_action": ObsTerm(terms.last_action),
    }
    critic = {**policy, "ee_to_target": ObsTerm(ee_to_target)}
    critic = {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in critic.items()}
    rewards = {
        "distance": RewardTerm(ee_distance, weight=-1.0),
        "reach_fine": RewardTerm(reach_kernel, weight=1.0, params={"std": 0.05}),
        "action_rate": RewardTerm(terms.action_rate_l2, weight=-0.01),
        "joint_vel": RewardTerm(terms.joint_vel_l2, weight=-0.001),
    }
    if torque:
        rewards["torque"] = RewardTerm(terms.joint_torque_l2, weight=-1e-5)
    return TaskCfg(
        robot="franka_panda",
        episode_s=4.0,
        observations={"policy": policy, "critic": critic},
        rewards=rewards,
        success=reached,
        scene=add_scene,
        sites=("end_effector", "base"),
        init_joint_noise=0.1,
        control={"action_type": "joint_torque"} if torque else {},
        params={
            "success_radius": 0.02,
            "target_table_size": 8192,
            "target_z_range": (0.15, 0.65),
            "target_min_radius": 0.3,
            "target_x_range": (0.3, 0.7),
            "target_y_max": 0.35,
        },
    )


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, torque: bool = False,
         **overrides) -> PandaReachEnv:
    """Registry factory of panda_reach (``torque=True``: joint-torque actions)."""
    task = "panda_reach_torque" if torque else "panda_reach"
    return make_task_env(PandaReachEnv, panda_reach_cfg(torque), task, num_envs, device, seed, **overrides)


def make_torque(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> PandaReachEnv:
    """Registry factory of panda_reach_torque."""
    return make(num_envs, device, seed, torque=True, **overrides)
