"""Export a run's policy as the contract-3 artifact (``robot_rl.export`` does the writing; a VLA policy,
``agent.policy_inputs == "vla"``, goes through ``robot_rl.export_vla``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from robot_rl.agents import Agent
from robot_rl.config.io import train_config_to_dict
from robot_rl.config.schema import TrainConfig
from robot_rl.deploy.actions import robot_action_spec
from robot_rl.deploy.artifact import OBSERVATION_TERMS, ChunkExecution
from robot_rl.errors import InputError
from robot_rl.export import PolicyHead, export_policy, make_meta
from sim.env import TaskEnv


def export_blocker(env: Any, task: str, policy_inputs: str = "policy") -> str | None:
    """Why the policy trained on ``env`` (of task ``task``) cannot be deployed, or None: only a
    :class:`sim.env.TaskEnv` has a robot, and its policy must observe only what a robot publishes (a VLA policy,
    ``policy_inputs == "vla"``, reads cameras, the instruction and joint positions: all published)."""
    if not isinstance(env, TaskEnv):
        return (f"task {task!r} has no robot to deploy to (a gymnasium-style benchmark task); the checkpoints "
                "under checkpoints/ hold the policy")
    if policy_inputs == "vla":
        return None
    sim_only = [term[0] for term in env.observation_layout["policy"] if term[0] not in OBSERVATION_TERMS]
    if sim_only:
        return (f"the policy of task {task!r} observes {sim_only}, which a robot does not publish (deployable "
                f"terms: {sorted(OBSERVATION_TERMS)}); the checkpoints hold the policy")
    return None


def export_agent_policy(
    agent: Agent, env: TaskEnv, out_dir: str | Path, cfg: TrainConfig, training: dict[str, Any],
    formats: list[str] | None = None, execute_len: int | None = None,
) -> Path:
    """Write ``agent.policy()`` (normaliser inside) with the env's robot metadata to ``out_dir``; a chunked
    policy is written whole (``chunk_length: H``) with the agent's chunk execution (``agent.policy_chunking()``).

    Args:
        env: the task env (its ``robot`` and ``observation_layout`` go into the metadata).
        formats: defaults to ``cfg.export_formats``.
    """
    if not isinstance(env, TaskEnv):
        raise ValueError(
            f"cannot export: env {type(env).__name__} has no robot/observation_layout (a sim task env has); "
            "set export_formats=[] to skip export"
        )
    robot = env.robot
    chunk_length, execution = agent.policy_chunking()
    if execute_len is not None:
        execution = open_loop_execution(execution, chunk_length, execute_len)
    if agent.policy_inputs == "vla":
        return export_vla_run(agent, env, out_dir, cfg, training, execution)
    meta = make_meta(
        robot=robot.name,
        joint_names=robot.joint_names,
        default_joint_pos=[j.default for j in robot.joints],
        observation_layout=env.observation_layout["policy"],
        action_scale=robot.control.action_scale,
        control_hz=robot.control.policy_hz,
        action_type=robot.control.action_type,
        chunk_length=chunk_length,
        chunk_execution=execution,
        task=cfg.task.name,
        training=training,
        config=train_config_to_dict(cfg),
    )
    return export_policy(PolicyHead(agent.policy(), meta), meta, out_dir, formats or cfg.export_formats)


def open_loop_execution(execution: ChunkExecution, chunk_length: int, execute_len: int) -> ChunkExecution:
    """``execution`` played open loop for ``execute_len`` of each chunk's ``chunk_length`` actions instead (what
    ``robot-rl export --execute-len`` writes into policy.yaml).

    Raises:
        InputError: ``execute_len`` outside ``1..chunk_length`` (a policy of single actions has only 1).
    """
    if not 1 <= execute_len <= chunk_length:
        raise InputError(f"--execute-len {execute_len}: this policy predicts chunks of {chunk_length} action(s), so "
                         f"it must be in 1..{chunk_length}. Fix: pick a length in that range (1: re-plan every step)")
    return dataclasses.replace(execution, mode="open_loop", execute_len=execute_len)


def export_vla_run(agent: Agent, env: TaskEnv, out_dir: str | Path, cfg: TrainConfig, training: dict[str, Any],
                   execution: ChunkExecution) -> Path:
    """Write ``agent.policy()`` (a :class:`~robot_rl.models.vla.policy.VLAPolicy`) as a VLA artifact (ONNX with the
    flow unrolled, the tokenizer inside) with the env's robot, the training image size and the agent's chunk
    execution (``agent.policy_chunking()``'s)."""
    from robot_rl.export_vla import export_vla_policy, make_vla_meta

    robot, policy = env.robot, agent.policy()
    action = robot_action_spec(robot)
    size = policy.model.config.image_size  # the training images' (square) size
    meta = make_vla_meta(policy, robot.name, robot.joint_names, [j.default for j in robot.joints], action,
                         robot.control.policy_hz, (size, size), chunk_execution=execution, task=cfg.task.name,
                         resize=policy.model.config.frame_resize,
                         training=training, config=train_config_to_dict(cfg))
    return export_vla_policy(policy, meta, out_dir)
