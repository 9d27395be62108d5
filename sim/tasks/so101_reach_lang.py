"""so101_reach_lang: four coloured spheres, the instruction names the one to reach; success within 2 cm.

At every reset the four targets (red, green, blue, yellow; :data:`sim.tasks.lang.COLOURS`) are drawn
from so101_reach's table of reachable gripper positions, at least ``target_min_separation`` apart in
x-y, and one instruction is drawn: a colour and a paraphrase of :data:`INSTRUCTIONS`. ``env.target``
is the named sphere (so so101_reach's rewards, success and :func:`reach_expert` apply to it).

The policy group holds the joints, the last action and all four target positions in the base frame
(which one is named is only in the instruction and the images); the critic adds the named target's
one-hot and the gripper-to-named-target vector. Cameras ``front``, ``top`` (:data:`REACH_CAMERAS`, which see
every target the task draws) and ``wrist`` are in the scene; they render only when asked for
(``cameras=["front", "top"]``).
"""

from __future__ import annotations

import mujoco
import torch

from sim.registry import make_task_env
from sim.robots import add_floor_and_light
from sim.task_cfg import ObsTerm, TaskCfg
from sim.tasks import terms
from sim.tasks.lang import (
    COLOURS,
    FixedCamera,
    InstructedTask,
    InstructionSet,
    add_cameras,
    draw_separated,
    target_one_hot,
)
from sim.tasks.so101_reach import So101ReachEnv, ee_to_target, reach_expert, so101_reach_cfg

INSTRUCTIONS = InstructionSet(
    targets=tuple(COLOURS),
    templates=(
        "reach the {target} target",
        "move the gripper to the {target} ball",
        "touch the {target} sphere",
        "go to the {target} one",
    ),
)


REACH_CAMERAS: tuple[FixedCamera, ...] = (
    ("front", (0.9, 0.0, 0.4), (0.2, 0.0, 0.15), 45.0),
    ("top", (0.3, 0.0, 1.0), (0.2, 0.0, 0.1), 40.0),
)
"""The world cameras of so101_reach_lang, placed so that every target the task can draw is in both frames (a
sphere 3.6-5.6 px wide at 64x64): ``front`` from in front of the robot, ``top`` from above. ``front`` gives the
targets' side-to-side and height, ``top`` their side-to-side and distance, so the pair fixes a target in 3-D."""
TARGET_RADIUS = 0.02
"""Radius of the (non-colliding) target spheres, in metres: what the cameras see; success is ``success_radius``."""


def target_body(colour: str) -> str:
    """Name of the mocap body of the ``colour`` target."""
    return f"target_{colour}"


def add_reach_lang_scene(spec: mujoco.MjSpec) -> None:
    """Floor, light, the cameras and one non-colliding mocap sphere per colour."""
    add_floor_and_light(spec)
    add_cameras(spec, REACH_CAMERAS)
    for colour, rgba in COLOURS.items():
        body = spec.worldbody.add_body(name=target_body(colour), mocap=True, pos=[0.2, 0.0, 0.15])
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[TARGET_RADIUS, 0, 0], rgba=list(rgba),
                      contype=0, conaffinity=0, group=2)


def targets_pos(env) -> torch.Tensor:
    """``[N, 3K]`` every target's position in the robot base frame, in colour order."""
    return (env.targets - env.state.site("base").unsqueeze(1)).flatten(1)


class So101ReachLangEnv(InstructedTask, So101ReachEnv):
    """SO-101 reaching for the target the instruction names, among four coloured ones."""

    instruction_set = INSTRUCTIONS
    task_buffers = ("targets", "target", "target_id", "paraphrase_id")

    def _init_task(self) -> None:
        self.target_table = torch.as_tensor(self._target_candidates(), dtype=torch.float32, device=self.device)
        count = len(self.instruction_set.targets)
        self.targets = torch.zeros(self.num_envs, count, 3, device=self.device)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self._mocaps = [int(self.model.body(target_body(c)).mocapid[0]) for c in self.instruction_set.targets]
        self._init_instructions()

    def _reset_task(self, ids: torch.Tensor) -> None:
        count = len(self.instruction_set.targets)
        self.targets[ids] = draw_separated(self, self.target_table, count, len(ids),
                                           self.cfg.params["target_min_separation"])
        self._draw_instructions(ids)
        self._instruction_changed(ids)

    def _instruction_changed(self, ids: torch.Tensor) -> None:
        self.target[ids] = self.targets[ids, self.target_id[ids]]
        self._move_markers(ids)

    def _target_changed(self, ids: torch.Tensor) -> None:
        """``set_target`` moves the named sphere."""
        self.targets[ids, self.target_id[ids]] = self.target[ids]
        self._move_markers(ids)

    def _move_markers(self, ids: torch.Tensor) -> None:
        env_ids = ids.cpu().numpy()
        for k, mocap in enumerate(self._mocaps):
            self.backend.set_mocap_pos(env_ids, mocap, self.targets[ids, k])

    def named_position(self) -> torch.Tensor:
        """``[N, 3]`` world position of the named sphere (``env.target``)."""
        return self.target.clone()

    def expert_action(self, target_id: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, 6]`` :func:`reach_expert`'s action towards the named target, or towards target ``target_id [N]``."""
        if target_id is None:
            return reach_expert(self)
        return reach_expert(self, target=self.targets[torch.arange(self.num_envs, device=self.device), target_id])


def so101_reach_lang_cfg() -> TaskCfg:
    """Default configuration of so101_reach_lang: so101_reach's, with its own scene and observations."""
    policy = {
        "joint_pos": ObsTerm(terms.joint_pos, noise=0.01),
        "joint_vel": ObsTerm(terms.joint_vel, scale=0.1, noise=0.05),
        "targets_pos": ObsTerm(targets_pos),
        "last_action": ObsTerm(terms.last_action),
    }
    critic = {**policy, "target_id": ObsTerm(target_one_hot), "ee_to_target": ObsTerm(ee_to_target)}
    critic = {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in critic.items()}
    return so101_reach_cfg().replace(observations={"policy": policy, "critic": critic}, scene=add_reach_lang_scene,
                                     params={"target_min_separation": 0.06, "paraphrases": True})


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> So101ReachLangEnv:
    """Registry factory of so101_reach_lang."""
    return make_task_env(So101ReachLangEnv, so101_reach_lang_cfg(), "so101_reach_lang", num_envs, device, seed,
                         **overrides)
