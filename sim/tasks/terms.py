"""Term functions shared by tasks: ``(env, **params) -> Tensor``.

Observation terms return ``[N, k]``; reward, termination and success terms return ``[N]``.
Policy-group observation terms use only what a real robot publishes (see docs/tasks.md, "The
observation vocabulary"); the ROS policy node rebuilds exactly these from its topics.
"""

from __future__ import annotations

import math

import torch

from sim.math import projected_gravity as _projected_gravity
from sim.math import quat_rotate_inverse

# ------------------------------------------------------------------ policy observations


def joint_pos(env) -> torch.Tensor:
    """``[N, J]`` joint positions relative to the default pose (JointState.position - default)."""
    return env.state.joint_pos - env.default_joint_pos


def joint_vel(env) -> torch.Tensor:
    """``[N, J]`` joint velocities (JointState.velocity)."""
    return env.state.joint_vel


def last_action(env) -> torch.Tensor:
    """``[N, A]`` the policy action applied in the last step (the node remembers what it sent)."""
    return env.action


def base_ang_vel(env) -> torch.Tensor:
    """``[N, 3]`` base angular velocity in the base frame (IMU gyro)."""
    return env.state.qvel[:, 3:6]


def projected_gravity(env) -> torch.Tensor:
    """``[N, 3]`` gravity direction in the base frame (from the IMU orientation quaternion)."""
    return env.cached("projected_gravity", lambda: _projected_gravity(env.state.qpos[:, 3:7]))


GAIT_PERIOD_S = 0.8
"""Period (s) of the gait clock (unitree_rl_gym's G1 ``period``); the deploy side's twin,
``robot_rl.deploy.observation.GAIT_PERIOD_S``, is pinned equal by tests/test_gait.py."""


def gait_clock(episode_step: torch.Tensor, dt: float, period: float = GAIT_PERIOD_S) -> torch.Tensor:
    """``[N]`` gait phase in ``[0, 1)``: ``(episode_step * dt mod period) / period``."""
    return torch.remainder(episode_step.to(torch.float64) * dt, period).div(period).to(torch.float32)


def gait_phase(env) -> torch.Tensor:
    """``[N, 2]`` (sin, cos) of ``2 pi`` times the gait clock (time since the episode/controller started)."""
    angle = 2.0 * math.pi * gait_clock(env.episode_step, env.dt)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=1)


# ------------------------------------------------------------------ privileged (critic) terms


def base_lin_vel(env) -> torch.Tensor:
    """``[N, 3]`` base linear velocity in the base frame (not measured on the robot)."""
    return quat_rotate_inverse(env.state.qpos[:, 3:7], env.state.qvel[:, 0:3])


def base_height(env) -> torch.Tensor:
    """``[N, 1]`` base height above the floor."""
    return env.state.qpos[:, 2:3]


def site_pos(env, role: str) -> torch.Tensor:
    """``[N, 3]`` world position of a tracked site."""
    return env.state.site(role)


# ------------------------------------------------------------------ regularisers ([N])


def action_rate_l2(env) -> torch.Tensor:
    """Squared change of the action between steps."""
    return torch.sum((env.action - env.last_action) ** 2, dim=1)


def beyond_safety(target: torch.Tensor, previous: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
                  max_step: float) -> torch.Tensor:
    """``[N]`` rad (summed over joints) by which joint targets ``target`` ``[N, A]`` lie beyond what the policy
    node's safety layer passes unchanged: outside ``[lower, upper]`` ``[A]``, or (once clamped to them) more than
    ``max_step`` from the previous command ``previous`` ``[N, A]``. 0 exactly where the layer passes every joint."""
    inside = torch.clamp(target, lower, upper)
    too_fast = torch.clamp((inside - previous).abs() - max_step, min=0.0)
    return torch.sum((target - inside).abs() + too_fast, dim=1)


def command_excess(env, max_step: float | None = None) -> torch.Tensor:
    """``[N]`` :func:`beyond_safety` of the last action's joint targets against the env's previous command, with
    ``max_step`` (default: robot.yaml's ``safety.max_step_change``). 0 for a policy whose commands the robot
    follows as given; weighted negative, it teaches the policy to ask only for what the safety layer lets through
    (docs/tasks.md, "Commands the robot follows as given"). 0 under torque control (no targets to pass)."""
    if env.robot.control.action_type == "joint_torque":
        return torch.zeros(env.num_envs, device=env.device)
    return _excess(env, env.requested_targets(), env.previous_ctrl, max_step)


def action_excess(env, action: torch.Tensor) -> torch.Tensor:
    """``[N]`` the :func:`command_excess` a step with ``action`` ``[N, A]`` would score, read before that step
    (against the env's current command): what an evaluation counts, since a step that ends an episode resets its
    env's buffers. Position control only."""
    return _excess(env, env.requested_targets(action), env.applied_ctrl)


def _excess(env, target: torch.Tensor, previous: torch.Tensor, max_step: float | None = None) -> torch.Tensor:
    """:func:`beyond_safety` with ``env``'s joint limits and ``max_step`` (default robot.yaml's)."""
    limit = env.robot.safety.max_step_change if max_step is None else max_step
    return beyond_safety(target, previous, env.joint_lower, env.joint_upper, limit)


def joint_vel_l2(env) -> torch.Tensor:
    """Squared joint velocities."""
    return torch.sum(env.state.joint_vel**2, dim=1)


def joint_torque_l2(env) -> torch.Tensor:
    """Squared actuator torques."""
    return torch.sum(env.state.actuator_force**2, dim=1)


def joint_limit_margin(env, margin: float = 0.05) -> torch.Tensor:
    """Total depth (rad) by which joints are within ``margin`` of their limits."""
    q = env.state.joint_pos
    below = torch.clamp(env.joint_lower + margin - q, min=0.0)
    above = torch.clamp(q - (env.joint_upper - margin), min=0.0)
    return torch.sum(below + above, dim=1)


def alive(env) -> torch.Tensor:
    """Constant 1 per step (weighted, a survival bonus)."""
    return torch.ones(env.num_envs, device=env.device)


# ------------------------------------------------------------------ terminations ([N] bool)


def base_below(env, height: float) -> torch.Tensor:
    """The base fell below ``height`` metres."""
    return env.state.qpos[:, 2] < height


def base_tilted(env, max_cos: float = 0.0) -> torch.Tensor:
    """The base's up axis tilted so that gravity's z in the base frame exceeds ``-max_cos``."""
    return projected_gravity(env)[:, 2] > -max_cos
