"""so101_lift: grasp a 2.5 cm cube on the floor with the SO-101 gripper and lift it 5 cm.

The long-horizon, sparse-reward manipulation task. A light cube (10 g, as so101-nexus's PickCube)
is dropped at a random position and yaw in front of the arm at every reset. Success is the cube
``lift_height`` above its start height, held for ``hold_steps`` control steps, with the gripper
still at the cube (a flung cube does not count). The default reward is sparse: 1 on success (the
episode then ends when ``success_terminates``); ``make(shaped=True)`` (task
``so101_lift_shaped``) adds dense reach, grasp and lift terms.

The policy sees the joints, its last action and the cube position in the robot base frame (what a
perception stack would publish); the critic also gets the cube's orientation and velocities and
the gripper-to-cube vector. Actions are PD targets around the default pose (robot.yaml's
``action_scale`` of 1.0 rad lets the wrist point down at the floor anywhere in the spawn area).

:func:`scripted_expert` solves the task with damped-least-squares IK on MuJoCo Jacobians: it is
the task's declared expert (``env.expert_action()``, what ``robot-rl record`` records), and the proof
that the task is solvable.
"""

from __future__ import annotations

import math
from functools import partial

import mujoco
import numpy as np
import torch

from sim.env import TaskEnv
from sim.math import clip_norm, dls_step, quat_from_yaw, quat_rotate, yaw_from_quat
from sim.registry import make_task_env
from sim.robots import add_floor_and_light
from sim.task_cfg import ObsTerm, RewardTerm, TaskCfg
from sim.tasks import terms

CUBE = "cube"
GRIPPER = "gripper"
"""The SO-101 body that carries the fixed jaw and the ``end_effector`` site; its -z axis points
along the fingers and the moving jaw closes along its +x axis."""
JAW = "moving_jaw_so101_v1"
"""The moving jaw's body (and mesh)."""
FIXED_JAW_MESH = "wrist_roll_follower_so101_v1"


def _mesh_vertices(model: mujoco.MjModel, geom: int) -> np.ndarray:
    """``[V, 3]`` vertices of mesh geom ``geom`` in its body's frame."""
    mesh = model.geom_dataid[geom]
    start = model.mesh_vertadr[mesh]
    verts = model.mesh_vert[start:start + model.mesh_vertnum[mesh]]
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, model.geom_quat[geom])
    return verts @ rot.reshape(3, 3).T + model.geom_pos[geom]


def replace_jaw_hulls(spec: mujoco.MjSpec, bands: int) -> None:
    """Swap the convex-hull collision of both jaws for stacks of boxes that follow the jaw shapes.

    MuJoCo collides a mesh as its convex hull; the hull of the fixed jaw's mesh (one piece with the
    wrist) fills the space between the jaws, so a cube under the open gripper is pushed away before
    the jaws can close on it. Each jaw mesh is cut into ``bands`` slices along the finger (the
    gripper's z axis) and each slice becomes the box bounding its vertices, in the jaw's own frame.
    """
    model = spec.compile()
    for body, mesh in ((GRIPPER, FIXED_JAW_MESH), (JAW, JAW)):
        body_id = model.body(body).id
        geom = next(g for g in range(model.ngeom) if model.geom_bodyid[g] == body_id
                    and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH and model.geom_contype[g]
                    and model.mesh(model.geom_dataid[g]).name == mesh)
        verts = _mesh_vertices(model, geom)
        along = verts[:, 2]
        if body == JAW:  # slice along the gripper's z axis, as for the fixed jaw
            rot = np.zeros(9)
            mujoco.mju_quat2Mat(rot, model.body_quat[body_id])
            along = (verts @ rot.reshape(3, 3).T + model.body_pos[body_id])[:, 2]
        edges = np.linspace(along.min(), along.max() + 1e-9, bands + 1)
        spec_body = spec.body(body)
        for i in range(bands):
            part = verts[(along >= edges[i]) & (along < edges[i + 1])]
            if len(part) == 0:
                continue
            lo, hi = part.min(axis=0), part.max(axis=0)
            spec_body.add_geom(name=f"{body}_box{i}", type=mujoco.mjtGeom.mjGEOM_BOX, pos=(lo + hi) / 2,
                               size=np.maximum((hi - lo) / 2, 5e-4), friction=[1.0, 0.05, 0.001], condim=4,
                               group=3, rgba=[0.2, 0.6, 1.0, 0.3])
        for g in spec.geoms:
            if g.parent.name == body and g.meshname == mesh and g.contype:
                g.contype = g.conaffinity = 0


def add_cube_scene(spec: mujoco.MjSpec, half_size: float, mass: float, friction: float,
                   jaw_bands: int = 10) -> None:
    """Floor, light, box-stack jaw collision and a free cube (``half_size`` m, ``mass`` kg)."""
    add_floor_and_light(spec)
    replace_jaw_hulls(spec, jaw_bands)
    body = spec.worldbody.add_body(name=CUBE, pos=[0.17, 0.0, half_size])
    body.add_freejoint(name=CUBE)
    body.add_geom(name=CUBE, type=mujoco.mjtGeom.mjGEOM_BOX, size=[half_size] * 3, mass=mass,
                  friction=[friction, 0.01, 0.001], condim=4, rgba=[0.9, 0.1, 0.1, 1.0])


# ------------------------------------------------------------------ terms


def cube_pos_world(env) -> torch.Tensor:
    """``[N, 3]`` cube centre in the world."""
    return env.state.body(CUBE)[0]


def cube_pos(env) -> torch.Tensor:
    """``[N, 3]`` cube centre in the robot base frame (a perception stack's estimate)."""
    return cube_pos_world(env) - env.state.site("base")


def cube_quat(env) -> torch.Tensor:
    """``[N, 4]`` cube orientation (wxyz), sign fixed so that w >= 0 (privileged)."""
    quat = env.state.body(CUBE)[1]
    return torch.where(quat[:, :1] < 0, -quat, quat)


def cube_lin_vel(env) -> torch.Tensor:
    """``[N, 3]`` cube linear velocity in the world (privileged)."""
    return env.state.qvel[:, env.cube_dof:env.cube_dof + 3]


def cube_ang_vel(env) -> torch.Tensor:
    """``[N, 3]`` cube angular velocity in the cube frame (privileged)."""
    return env.state.qvel[:, env.cube_dof + 3:env.cube_dof + 6]


def gripper_to_cube(env) -> torch.Tensor:
    """``[N, 3]`` vector from the gripper site to the cube centre (privileged)."""
    return cube_pos_world(env) - env.state.site("end_effector")


def gripper_distance(env) -> torch.Tensor:
    """``[N]`` gripper-site-to-cube-centre distance (m)."""
    return torch.linalg.norm(gripper_to_cube(env), dim=1)


def lift_gain(env) -> torch.Tensor:
    """``[N]`` height (m) the cube has gained since the reset."""
    return cube_pos_world(env)[:, 2] - env.cube_start_z


def cube_held(env) -> torch.Tensor:
    """``[N]`` bool: the gripper site is within ``grasp_radius`` of the cube and the jaw is closed on
    it (opened more than an empty closed jaw, closed more than ``grasp_open_max``) - a position-only
    grasp proxy, as contact forces are not computed by the batch backend."""
    p = env.cfg.params
    jaw = env.state.joint_pos[:, env.gripper_index]
    return (gripper_distance(env) < p["grasp_radius"]) & (jaw > p["grasp_jaw_min"]) & (jaw < p["grasp_open_max"])


def lifted(env) -> torch.Tensor:
    """``[N]`` bool: the cube is ``lift_height`` above its start and the gripper is at it."""
    p = env.cfg.params
    return (lift_gain(env) >= p["lift_height"]) & (gripper_distance(env) < p["grasp_radius"])


def success(env) -> torch.Tensor:
    """``[N]`` bool: :func:`lifted` for ``hold_steps`` consecutive control steps (updated in ``_pre_step``)."""
    return env.lifted_steps >= env.cfg.params["hold_steps"]


def success_reward(env) -> torch.Tensor:
    """``[N]`` 1.0 on success, else 0 (the sparse reward)."""
    return success(env).float()


def reach_reward(env, std: float) -> torch.Tensor:
    """``[N]`` in (0, 1]: 1 - tanh(gripper-to-cube distance / std)."""
    return 1.0 - torch.tanh(gripper_distance(env) / std)


def grasp_reward(env) -> torch.Tensor:
    """``[N]`` 1.0 while :func:`cube_held`."""
    return cube_held(env).float()


def lift_reward(env) -> torch.Tensor:
    """``[N]`` in [0, 1]: lift progress towards ``lift_height``, counted only while the cube is held."""
    progress = torch.clamp(lift_gain(env) / env.cfg.params["lift_height"], 0.0, 1.0)
    return progress * cube_held(env).float()


# ------------------------------------------------------------------ env


class So101LiftEnv(TaskEnv):
    """SO-101 cube lifting; the cube is re-spawned at every reset."""

    task_buffers = ("cube_start_z", "lifted_steps")
    has_expert = True

    def __init__(self, cfg: TaskCfg, **kwargs) -> None:
        p = cfg.params
        scene = partial(add_cube_scene, half_size=p["cube_half_size"], mass=p["cube_mass"],
                        friction=p["cube_friction"])
        super().__init__(cfg.replace(scene=scene), **kwargs)

    def _init_task(self) -> None:
        joint = self.model.joint(CUBE)
        self.cube_qpos = int(joint.qposadr[0])
        self.cube_dof = int(joint.dofadr[0])
        self.gripper_index = self.robot.joint_names.index(GRIPPER)
        self.cube_start_z = torch.zeros(self.num_envs, device=self.device)
        self.lifted_steps = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qpos, qvel = super()._initial_state(ids)
        p = self.cfg.params
        n = len(ids)
        (cx, cy), (hx, hy) = p["cube_spawn_center"], p["cube_spawn_half_extent"]
        x = self.rand_uniform(cx - hx, cx + hx, (n,))
        y = self.rand_uniform(cy - hy, cy + hy, (n,))
        yaw = self.rand_uniform(-math.pi / 4, math.pi / 4, (n,))
        a = self.cube_qpos
        qpos[:, a] = x
        qpos[:, a + 1] = y
        qpos[:, a + 2] = p["cube_half_size"]
        qpos[:, a + 3:a + 7] = quat_from_yaw(yaw)
        return qpos, qvel

    def _reset_task(self, ids: torch.Tensor) -> None:
        self.cube_start_z[ids] = self.cfg.params["cube_half_size"]
        self.lifted_steps[ids] = 0

    def _pre_step(self) -> None:
        self.lifted_steps = torch.where(lifted(self), self.lifted_steps + 1, torch.zeros_like(self.lifted_steps))

    def expert_action(self) -> torch.Tensor:
        """``[N, A]`` :func:`scripted_expert`'s action."""
        return scripted_expert(self)


def so101_lift_cfg(shaped: bool = False) -> TaskCfg:
    """Default configuration of so101_lift; ``shaped=True`` adds reach/grasp/lift shaping terms."""
    policy = {
        "joint_pos": ObsTerm(terms.joint_pos, noise=0.01),
        "joint_vel": ObsTerm(terms.joint_vel, scale=0.1, noise=0.05),
        "last_action": ObsTerm(terms.last_action),
        "cube_pos": ObsTerm(cube_pos, noise=0.002),
    }
    critic = {**policy, "cube_quat": ObsTerm(cube_quat), "cube_lin_vel": ObsTerm(cube_lin_vel),
              "cube_ang_vel": ObsTerm(cube_ang_vel, scale=0.1), "gripper_to_cube": ObsTerm(gripper_to_cube)}
    critic = {k: ObsTerm(v.func, v.scale, 0.0, v.params) for k, v in critic.items()}
    rewards = {"success": RewardTerm(success_reward, weight=1.0)}
    if shaped:
        rewards |= {
            "reach": RewardTerm(reach_reward, weight=0.1, params={"std": 0.05}),
            "grasp": RewardTerm(grasp_reward, weight=0.25),
            "lift": RewardTerm(lift_reward, weight=0.5),
            "action_rate": RewardTerm(terms.action_rate_l2, weight=-0.005),
        }
    return TaskCfg(
        robot="so101",
        episode_s=8.0,
        observations={"policy": policy, "critic": critic},
        rewards=rewards,
        success=success,
        success_terminates=True,
        sites=("end_effector", "base"),
        bodies=(CUBE, GRIPPER),
        init_joint_noise=0.05,
        params={
            "cube_half_size": 0.0125,
            "cube_mass": 0.01,
            "cube_friction": 1.0,
            "cube_spawn_center": (0.17, 0.0),
            "cube_spawn_half_extent": (0.035, 0.06),
            "lift_height": 0.05,
            "hold_steps": 1,
            "grasp_radius": 0.04,
            "grasp_jaw_min": 0.0,
            "grasp_open_max": 0.5,
        },
    )


def make(num_envs: int = 1, device: str = "cpu", seed: int = 0, shaped: bool = False,
         **overrides) -> So101LiftEnv:
    """Registry factory of so101_lift (``shaped=True``: with shaping terms)."""
    task = "so101_lift_shaped" if shaped else "so101_lift"
    return make_task_env(So101LiftEnv, so101_lift_cfg(shaped), task, num_envs, device, seed, **overrides)


def make_shaped(num_envs: int = 1, device: str = "cpu", seed: int = 0, **overrides) -> So101LiftEnv:
    """Registry factory of so101_lift_shaped."""
    return make(num_envs, device, seed, shaped=True, **overrides)


# ------------------------------------------------------------------ scripted expert


def wrap_quarter_turn(angle: torch.Tensor) -> torch.Tensor:
    """``angle`` wrapped into ``[-pi/4, pi/4)``: the smallest turn onto a face of a square. Any shape."""
    return torch.remainder(angle + math.pi / 4, math.pi / 2) - math.pi / 4


def scripted_expert(env: So101LiftEnv, hover: float = 0.04, z_offset: float = 0.0, jaw_open: float = 0.6,
                    jaw_closed: float = -0.17, grasped_jaw: float = 0.16, max_step: float = 0.02,
                    cube_pose: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Batched pick-and-lift demonstrator for :class:`So101LiftEnv`: approach, descend, close, lift.

    Stateless: the stage of each env follows from the current state (the jaw angle is its memory),
    so it can start at any step and retries a failed grasp. The gripper points straight down, its
    jaws turned onto the nearest pair of cube faces, with the fixed jaw against one face; each step
    moves the gripper site at most ``max_step`` metres by damped-least-squares IK on MuJoCo's
    Jacobians of the arm joints.

    Args:
        env: the lift env (its ``state`` is read, nothing is changed).
        hover: height (m) above the grasp point from which the gripper descends.
        z_offset: grasp height of the gripper site relative to the cube centre (m).
        jaw_open, jaw_closed: gripper joint targets (rad) to open and to squeeze.
        grasped_jaw: the jaw is taken to hold the cube once it is closed below this angle (rad).
        max_step: largest Cartesian move of the gripper site per control step (m).
        cube_pose: world position ``[N, 3]`` and wxyz orientation ``[N, 4]`` of the cube to lift (default: the
            ``cube`` body); the env also provides ``cube_start_z [N]``, ``gripper_index`` and the params
            ``cube_half_size``, ``grasp_radius``, ``lift_height``.

    Returns:
        ``[num_envs, action_dim]`` actions in ``[-1, 1]``.
    """
    state = env.state
    p = env.cfg.params
    q = state.joint_pos
    site = state.site("end_effector")
    grip_quat = state.body(GRIPPER)[1]
    cube, cube_q = state.body(CUBE) if cube_pose is None else cube_pose
    n = env.num_envs
    ex = torch.zeros(n, 3, device=env.device)
    ex[:, 0] = 1.0
    ez = torch.zeros_like(ex)
    ez[:, 2] = 1.0
    jaw_axis = quat_rotate(grip_quat, ex)
    finger_up = quat_rotate(grip_quat, ez)
    jaw_yaw = torch.atan2(jaw_axis[:, 1], jaw_axis[:, 0])
    # with the wrist unrolled the jaws close along the arm's heading: turn onto the faces nearest it
    to_cube = cube - state.site("base")
    heading = torch.atan2(to_cube[:, 1], to_cube[:, 0])
    face_yaw = heading + wrap_quarter_turn(yaw_from_quat(cube_q) - heading)
    yaw_error = torch.remainder(face_yaw - jaw_yaw + math.pi, 2 * math.pi) - math.pi
    face = torch.stack([torch.cos(face_yaw), torch.sin(face_yaw)], dim=1)

    grasp = cube.clone()
    grasp[:, :2] -= face * (p["cube_half_size"] + 0.001)
    grasp[:, 2] += z_offset
    to_grasp = grasp - site
    xy_error = torch.linalg.norm(to_grasp[:, :2], dim=1)
    jaw = q[:, env.gripper_index]
    hover_z = grasp[:, 2] + hover

    holding = (jaw < grasped_jaw) & (jaw > jaw_closed + 0.05)
    lift = holding & (torch.linalg.norm(cube - site, dim=1) < p["grasp_radius"])
    close = ~lift & (torch.linalg.norm(to_grasp, dim=1) < 0.006)
    descend = ~lift & ~close & (xy_error < 0.01) & (yaw_error.abs() < 0.1)
    retreat = ~lift & ~close & ~descend & (site[:, 2] < hover_z - 0.015) & (xy_error > 0.02)

    target = torch.where(descend.unsqueeze(1) | close.unsqueeze(1), grasp,
                         torch.cat([grasp[:, :2], hover_z.unsqueeze(1)], dim=1))
    target = torch.where(retreat.unsqueeze(1), torch.cat([site[:, :2], hover_z.unsqueeze(1)], dim=1), target)
    lift_z = env.cube_start_z + z_offset + p["lift_height"] + 0.03
    target = torch.where(lift.unsqueeze(1), torch.cat([site[:, :2], lift_z.unsqueeze(1)], dim=1), target)
    yaw_error = torch.where(lift, 0.0, yaw_error)

    rot_error = torch.linalg.cross(finger_up, ez, dim=1) + yaw_error.unsqueeze(1) * ez
    error = torch.cat([clip_norm(target - site, max_step), 0.5 * rot_error], dim=1)
    arm = env.robot.joint_names[:env.gripper_index]
    dofs = [int(env.model.joint(name).dofadr[0]) for name in arm]
    body = env.model.body(GRIPPER).id
    jacp, jacr = env.jacobian(body, site)
    jac = torch.cat([jacp, jacr], dim=1)[:, :, dofs].float()
    q_target = q.clone()
    q_target[:, :env.gripper_index] += dls_step(jac, error, damping=0.05)
    q_target[:, env.gripper_index] = torch.where(lift | close, jaw_closed, jaw_open)
    return env.action_for_targets(q_target)
