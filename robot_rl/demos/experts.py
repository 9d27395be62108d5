"""Scripted experts: batched ``expert(env) -> action [num_envs, action_dim]`` in ``[-1, 1]``.

Experts read the env's privileged state (targets, object poses) and never change it. They are
stateless: the action follows from the current state alone, so they can take over at any step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sim.tasks.so101_lift import clip_norm, dls_step, scripted_expert

Expert = Callable[..., torch.Tensor]
GRIPPER_BODY = "gripper"


def so101_reach_expert(env, max_step: float = 0.015, damping: float = 0.05) -> torch.Tensor:
    """Move the SO-101 gripper site straight at the target by damped-least-squares IK.

    Each control step asks for a Cartesian move of at most ``max_step`` metres towards
    ``env.get_target()`` and maps it to the five arm joints with the MuJoCo Jacobian of the gripper
    body at the site; the gripper joint holds its default.

    Args:
        env: an ``so101_reach`` env (reads ``env.state`` and ``env.get_target()`` ``[N, 3]``).
        max_step: largest Cartesian move per step (m).
        damping: DLS damping (m).

    Returns:
        ``[num_envs, 6]`` actions in ``[-1, 1]``.
    """
    state = env.state
    site = state.site("end_effector")
    arm = env.robot.joint_names[:5]
    dofs = [int(env.model.joint(name).dofadr[0]) for name in arm]
    jacp, _ = env.jacobian(env.model.body(GRIPPER_BODY).id, site)
    jac = jacp[:, :, dofs].float()
    q_target = state.joint_pos.clone()
    q_target[:, :5] += dls_step(jac, clip_norm(env.get_target() - site, max_step), damping)
    q_target[:, 5] = env.default_joint_pos[5]
    return env.action_for_targets(q_target)


EXPERTS: dict[str, Expert] = {
    "so101_reach": so101_reach_expert,
    "so101_lift": scripted_expert,
    "so101_lift_shaped": scripted_expert,
}


def expert_for(task: str) -> Expert:
    """The scripted expert of ``task``; a clear error lists the tasks that have one."""
    if task not in EXPERTS:
        raise KeyError(
            f"no scripted expert for task {task!r}; experts exist for {sorted(EXPERTS)}. "
            "Record a trained policy instead (robot-rl record --policy <artifact dir>)."
        )
    return EXPERTS[task]
