"""Terms of the Unitree G1 tasks: velocity-command tracking, foot-contact proxies and posture.

Terms are ``(env, **params) -> Tensor`` (``[N]`` for rewards, ``[N, k]`` for observations) and read
``env.state`` plus the buffers a :class:`sim.tasks.g1_locomotion.G1LocomotionEnv` keeps
(``command``, ``foot_contact``, ``first_contact``, ``touchdown_air_time``).

Contacts without contact forces: the ``Batch`` backend steps to the velocity stage, so MuJoCo never
computes contact forces for us. The G1 foot collides through four small spheres (heel and toe,
inner and outer); the scene edit puts a site at each centre. A foot's height is the bottom of its
lowest sphere (lowest site minus the radius), exact whatever the foot's tilt, and the foot
counts as *in contact* when that height is below ``contact_height``. With the default 0 this is
exactly MuJoCo's own condition for a sphere-plane contact (penetration, margin 0), so the proxy
agrees with the contacts MuJoCo detects (tests/test_g1_tasks.py checks it). It reads only positions,
so a GPU backend gives the same answer; it says nothing about contact *forces* (a foot barely
touching counts as much as one carrying the robot), and it holds for a flat floor at z = 0 only.
"""

from __future__ import annotations

import torch

from sim.tasks import terms

FEET = ("left_foot", "right_foot")
"""Foot order of every ``[N, 2]`` foot tensor."""

# ------------------------------------------------------------------ pure math (hand-tested)


def exp_kernel(error_sq: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-error_sq / sigma)``: 1 at zero error, ``1/e`` at ``error_sq == sigma``. Any shape."""
    return torch.exp(-error_sq / sigma)


def step_air_time(air_time: torch.Tensor, contact: torch.Tensor,
                  dt: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Advance per-foot air timers by one control step.

    Args:
        air_time: ``[N, F]`` seconds each foot has been off the floor before this step.
        contact: ``[N, F]`` bool, the foot is on the floor after this step.
        dt: control period (s).

    Returns:
        ``(air_time [N, F], first_contact [N, F] bool, touchdown_air_time [N, F])``: the new timers
        (0 for feet in contact), which feet touched down in this step, and for those the length of
        the swing that just ended (0 elsewhere).
    """
    first_contact = contact & (air_time > 0)
    swing = air_time + dt
    touchdown = torch.where(first_contact, swing, torch.zeros_like(swing))
    return torch.where(contact, torch.zeros_like(swing), swing), first_contact, touchdown


def air_time_reward(touchdown_air_time: torch.Tensor, first_contact: torch.Tensor, threshold: float,
                    moving: torch.Tensor) -> torch.Tensor:
    """``[N]`` sum over feet touching down of ``(swing length - threshold)``, zero where not ``moving``.

    Swings longer than ``threshold`` seconds are rewarded, shorter ones penalised (no shuffling).
    """
    per_foot = (touchdown_air_time - threshold) * first_contact.float()
    return per_foot.sum(dim=1) * moving.float()


def leg_phases(clock: torch.Tensor, offset: float = 0.5) -> torch.Tensor:
    """``[N, 2]`` per-leg gait phase in ``[0, 1)``: left = ``clock``, right = ``clock + offset`` (mod 1)."""
    return torch.stack([clock, torch.remainder(clock + offset, 1.0)], dim=1)


def contact_schedule_match(contact: torch.Tensor, phases: torch.Tensor, stance: float) -> torch.Tensor:
    """``[N]`` number of feet (0-2) whose contact agrees with the schedule (stance while phase < ``stance``)."""
    return (contact == (phases < stance)).float().sum(dim=1)


def swing_height_error(heights: torch.Tensor, contact: torch.Tensor, target: float) -> torch.Tensor:
    """``[N]`` sum over feet off the floor of ``(height - target)^2`` (m^2); feet in contact add 0."""
    return ((heights - target) ** 2 * (~contact).float()).sum(dim=1)


# ------------------------------------------------------------------ observations


def velocity_command(env) -> torch.Tensor:
    """``[N, 3]`` commanded (vx, vy, yaw rate) in the base frame (the robot's /cmd_vel Twist)."""
    return env.command


def foot_heights(env) -> torch.Tensor:
    """``[N, 2]`` height of the lowest point of the left and right foot above the floor (privileged)."""
    def compute() -> torch.Tensor:
        z = env.state.site_pos[:, env.foot_site_index, 2].view(env.num_envs, len(FEET), -1)
        return z.amin(dim=2) - env.foot_radius  # not .min(dim): with indices it stalls ms on a busy CPU

    return env.cached("foot_heights", compute)


def foot_contacts(env) -> torch.Tensor:
    """``[N, 2]`` 1.0 where a foot is in contact by the height proxy (privileged)."""
    return env.foot_contact.float()


def foot_air_time(env) -> torch.Tensor:
    """``[N, 2]`` seconds each foot has been off the floor (privileged)."""
    return env.air_time


# ------------------------------------------------------------------ locomotion rewards ([N])


def track_lin_vel_xy(env, sigma: float) -> torch.Tensor:
    """Exp kernel of the squared error between commanded and actual base-frame (vx, vy)."""
    error_sq = torch.sum((env.command[:, :2] - terms.base_lin_vel(env)[:, :2]) ** 2, dim=1)
    return exp_kernel(error_sq, sigma)


def track_ang_vel_z(env, sigma: float) -> torch.Tensor:
    """Exp kernel of the squared error between commanded and actual yaw rate (base frame)."""
    error_sq = (env.command[:, 2] - env.state.qvel[:, 5]) ** 2
    return exp_kernel(error_sq, sigma)


def feet_air_time(env, threshold: float, min_command: float) -> torch.Tensor:
    """Swing-length reward at touchdown (see :func:`air_time_reward`), only while commanded to move."""
    moving = torch.linalg.norm(env.command, dim=1) > min_command
    return air_time_reward(env.touchdown_air_time, env.first_contact, threshold, moving)


def gait_contact(env, stance: float) -> torch.Tensor:
    """Feet whose contact follows the gait clock (:func:`contact_schedule_match`; unitree_rl_gym's ``contact``)."""
    phases = leg_phases(terms.gait_clock(env.episode_step, env.dt))
    return contact_schedule_match(env.foot_contact, phases, stance)


def feet_swing_height(env, height: float) -> torch.Tensor:
    """Squared miss of the swing-foot height ``height`` (:func:`swing_height_error`)."""
    return swing_height_error(foot_heights(env), env.foot_contact, height)


# ------------------------------------------------------------------ posture rewards ([N])


def tilt_l2(env) -> torch.Tensor:
    """Squared horizontal part of gravity in the base frame: 0 when upright, 1 when lying flat."""
    return torch.sum(terms.projected_gravity(env)[:, :2] ** 2, dim=1)


def base_height_l2(env, target: float) -> torch.Tensor:
    """Squared deviation (m^2) of the base height from ``target``."""
    return (env.state.qpos[:, 2] - target) ** 2


def lin_vel_z_l2(env) -> torch.Tensor:
    """Squared vertical base velocity (bouncing)."""
    return env.state.qvel[:, 2] ** 2


def ang_vel_xy_l2(env) -> torch.Tensor:
    """Squared roll and pitch rates of the base (wobbling)."""
    return torch.sum(env.state.qvel[:, 3:5] ** 2, dim=1)


def default_pose_l1(env, joints: tuple[int, ...]) -> torch.Tensor:
    """Sum of ``|q - default|`` (rad) over the joint indices ``joints`` (robot.yaml order)."""
    index = torch.as_tensor(joints, device=env.device)
    return torch.sum(torch.abs(env.state.joint_pos[:, index] - env.default_joint_pos[index]), dim=1)
