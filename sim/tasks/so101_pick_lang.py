"""so101_pick_lang: three coloured cubes on the floor, lift the one the instruction names 5 cm.

so101_lift with three cubes (red, green, blue; :data:`sim.tasks.lang.COLOURS`) dropped at random
positions and yaws in the spawn box (within ``cube_spawn_radius`` of the base axis), at least
``cube_min_separation`` apart, and one instruction per episode (a
colour and a paraphrase of :data:`INSTRUCTIONS`). Success is so101_lift's on the named cube: it is
``lift_height`` above its start with the gripper at it, for ``hold_steps`` control steps; lifting
another cube does not count. The reward is sparse (1 on success, which ends the episode).

The policy group holds the joints, the last action and every cube's position in the base frame; the
critic adds the named cube's one-hot, orientation and the gripper-to-named-cube vector. The expert is
so101_lift's :func:`scripted_expert` aimed at the named cube. Cameras ``front`` and ``wrist`` render
only when asked for (``cameras=["front"]``).
"""

from __future__ import annotations

import math

import mujoco
import torch

from sim.env import TaskEnv
from sim.math import quat_from_yaw
from sim.registry import make_task_env
from sim.robots import add_floor_and_light
from sim.task_cfg import ObsTerm, RewardTerm, TaskCfg
from sim.tasks.lang import COLOURS, InstructedTask, InstructionSet, add_cameras, draw_separated, target_one_hot
from sim.tasks.so101_lift import GRIPPER, replace_jaw_hulls, scripted_expert, so101_lift_cfg

CUBE_COLOURS = tuple(COLOURS)[:3]
INSTRUCTIONS = InstructionSet(
    targets=CUBE_COLOURS,
    templates=(
        "pick up the {target} cube",
        "lift the {target} block",
        "grasp the {target} cube and raise it",
        "pick the {target} one up",
    ),
)


def cube_body(colour: str) -> str:
    """Name of the ``colour`` cube's body (and free joint)."""
    return f"cube_{colour}"


def add_pick_lang_scene(spec: mujoco.MjSpec, half_size: float, mass: float, friction: float) -> None:
    """Floor, light, cameras, box-stack jaw collision and one free cube per colour of :data:`CUBE_COLOURS`."""
    add_floor_and_light(spec)
    add_cameras(spec)
    replace_jaw_hulls(spec, bands=10)
    for k, colour in enumerate(CUBE_COLOURS):
        body = spec.worldbody.add_body(name=cube_body(colour), pos=[0.17, 0.08 * (k - 1), half_size])
        body.add_freejoint(name=cube_body(colour))
        body.add_geom(name=cube_body(colour), type=mujoco.mjtGeom.mjGEOM_BOX, size=[half_size] * 3, mass=mass,
                      friction=[friction, 0.01, 0.001], condim=4, rgba=list(COLOURS[colour]))


# ------------------------------------------------------------------ terms


def cube_poses(env) -> tuple[torch.Tensor, torch.Tensor]:
    """World positions ``[N, K, 3]`` and wxyz orientations ``[N, K, 4]`` of the cubes, in colour order."""
    def compute() -> torch.Tensor:
        poses = [torch.cat(env.state.body(cube_body(c)), dim=1) for c in CUBE_COLOURS]
        return torch.stack(poses, dim=1)

    poses = env.cached("cube_poses", compute)
    return poses[..., :3], poses[..., 3:]


def named_cube(env) -> tuple[torch.Tensor, torch.Tensor]:
    """World position ``[N, 3]`` and wxyz orientation ``[N, 4]`` of the cube the instruction names."""
    pos, quat = cube_poses(env)
    rows = torch.arange(env.num_envs, device=env.device)
    return pos[rows, env.target_id], quat[rows, env.target_id]


def cubes_pos(env) -> torch.Tensor:
    """``[N, 3K]`` every cube's centre in the robot base frame (a perception stack's estimate)."""
    return (cube_poses(env)[0] - env.state.site("base").unsqueeze(1)).flatten(1)


def named_cube_quat(env) -> torch.Tensor:
    """``[N, 4]`` named cube's orientation (wxyz, w >= 0; privileged)."""
    quat = named_cube(env)[1]
    return torch.where(quat[:, :1] < 0, -quat, quat)


def gripper_to_named_cube(env) -> torch.Tensor:
    """``[N, 3]`` vector from the gripper site to the named cube's centre (privileged)."""
    return named_cube(env)[0] - env.state.site("end_effector")


def lifted(env) -> torch.Tensor:
    """``[N]`` bool: the named cube is ``lift_height`` above its start and the gripper is within ``grasp_radius``."""
    p = env.cfg.params
    gain = named_cube(env)[0][:, 2] - env.cube_start_z
    near = torch.linalg.norm(gripper_to_named_cube(env), dim=1) < p["grasp_radius"]
    return (gain >= p["lift_height"]) & near


def success(env) -> torch.Tensor:
    """``[N]`` bool: :func:`lifted` for ``hold_steps`` consecutive control steps."""
    return env.lifted_steps >= env.cfg.params["hold_steps"]


def success_reward(env) -> torch.Tensor:
    """``[N]`` 1.0 on success, else 0."""
    return success(env).float()


# ------------------------------------------------------------------ env


class So101PickLangEnv(InstructedTask, TaskEnv):
    """SO-101 lifting the cube the instruction names; the cubes are re-spawned at every reset."""

    instruction_set = INSTRUCTIONS
    task_buffers = ("cube_start_z", "lifted_steps", "target_id", "paraphrase_id")
    has_expert = True

    def __init__(self, cfg: TaskCfg, **kwargs) -> None:
        p = cfg.params
        def scene(spec: mujoco.MjSpec) -> None:
            add_pick_lang_scene(spec, p["cube_half_size"], p["cube_mass"], p["cube_friction"])

        super().__init__(cfg.replace(scene=scene), **kwargs)

    def _init_task(self) -> None:
        self.cube_qpos = [int(self.model.joint(cube_body(c)).qposadr[0]) for c in CUBE_COLOURS]
        self.gripper_index = self.robot.joint_names.index(GRIPPER)
        self.cube_start_z = torch.zeros(self.num_envs, device=self.device)
        self.lifted_steps = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        (cx, cy), (hx, hy) = self.cfg.params["cube_spawn_center"], self.cfg.params["cube_spawn_half_extent"]
        grid = torch.stack(torch.meshgrid(torch.linspace(cx - hx, cx + hx, 41), torch.linspace(cy - hy, cy + hy, 41),
                                          indexing="ij"), dim=-1).reshape(-1, 2)
        lo, hi = self.cfg.params["cube_spawn_radius"]  # from the base axis: the corners are out of easy reach
        grid = grid[(grid.norm(dim=1) >= lo) & (grid.norm(dim=1) <= hi)]
        self._spawn_grid = torch.cat([grid, torch.zeros(len(grid), 1)], dim=1).to(self.device)
        self._init_instructions()

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super()._initial_state(ids)
        p = self.cfg.params
        n = len(ids)
        xy = draw_separated(self, self._spawn_grid, len(CUBE_COLOURS), n, p["cube_min_separation"])
        for k, a in enumerate(self.cube_qpos):
            qpos[:, a:a + 2] = xy[:, k, :2]
            qpos[:, a + 2] = p["cube_half_size"]
            qpos[:, a + 3:a + 7] = quat_from_yaw(self.rand_uniform(-math.pi / 4, math.pi / 4, (n,)))
        return qpos, qvel

    def _reset_task(self, ids: torch.Tensor) -> None:
        self.cube_start_z[ids] = self.cfg.params["cube_half_size"]
        self.lifted_steps[ids] = 0
        self._draw_instructions(ids)

    def _instruction_changed(self, ids: torch.Tensor) -> None:
        self.lifted_steps[ids] = 0

    def _pre_step(self) -> None:
        self.lifted_steps = torch.where(lifted(self), self.lifted_steps + 1, torch.zeros_like(self.lifted_steps))

    def named_position(self) -> torch.Tensor:
        """``[N, 3]`` world centre of the named cube (it moves with the cube once grasped)."""
        return named_cube(self)[0].clone()

    def expert_action(self, target_id: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, 6]`` :func:`scripted_expert` lifting the named cube, or cube ``target_id [N]``."""
        if target_id is None:
            return scripted_expert(self, cube_pose=named_cube(self))
        pos, quat = cube_poses(self)
        rows = torch.arange(self.num_envs, device=self.device)
        return scripted_expert(self, cube_pose=(pos[rows, target_id], quat[rows, target_id]))


def so101_pick_lang_cfg() -> TaskCfg:
    """Default configuration of so101_pick_lang: so101_lift's (sparse reward, episode, thresholds; its jaw
    params unused) with its own cubes, observations and spawn area."""
    lift = so101_lift_cfg()
    policy = {k: v for k, v in lift.observations["policy"].items() if k != "cube_pos"}
    policy["cubes_pos"] = ObsTerm(cubes_pos, noise=0.002)
    critic = {**policy, "target_id": ObsTerm(target_one_hot), "cube_quat": ObsTerm(named_cube_quat),
              "gripper_to_cube": ObsTerm(gripper_to_named_cube)}
    critic = {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in critic.items()}
    return lift.replace(
        observations={"policy": policy, "critic": critic},
        rewards={"success": RewardTerm(success_reward, weight=1.0)},
        bodies=(*(cube_body(c) for c in CUBE_COLOURS), GRIPPER),
        params={"cube_spawn_center": (0.165, 0.0), "cube_spawn_half_extent": (0.04, 0.08),
                "cube_spawn_radius": (0.13, 0.2), "cube_min_separation": 0.06, "paraphrases": True},
    )


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> So101PickLangEnv:
    """Registry factory of so101_pick_lang."""
    return make_task_env(So101PickLangEnv, so101_pick_lang_cfg(), "so101_pick_lang", num_envs, device, seed,
                         **overrides)
