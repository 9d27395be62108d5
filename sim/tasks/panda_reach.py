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
import numpy as np

from sim.registry import make_task_env
from sim.task_cfg import RewardTerm, TaskCfg
from sim.tasks import terms
from sim.tasks.so101_reach import ReachEnv, add_target_marker, reach_observations, reach_rewards, reached

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


class PandaReachEnv(ReachEnv):
    """Panda reaching; targets kept inside a box in front of the robot."""

    def _target_candidates(self) -> np.ndarray:
        p = self.cfg.params
        table = super()._target_candidates()
        (x_lo, x_hi), y_max = p["target_x_range"], p["target_y_max"]
        keep = (table[:, 0] >= x_lo) & (table[:, 0] <= x_hi) & (abs(table[:, 1]) <= y_max)
        if not keep.any():
            raise ValueError(f"panda_reach: no reachable target inside x {p['target_x_range']}, |y| <= {y_max}, "
                             f"z {p['target_z_range']}; widen the ranges")
        return table[keep]


def panda_reach_cfg(torque: bool = False) -> TaskCfg:
    """Default configuration of panda_reach; ``torque=True`` gives joint-torque actions."""
    rewards = reach_rewards()
    if torque:
        rewards["torque"] = RewardTerm(terms.joint_torque_l2, weight=-1e-5)
    return TaskCfg(
        robot="franka_panda",
        episode_s=4.0,
        observations=reach_observations(),
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
            "target_action_fraction": 0.9,
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
