"""Export a run's policy as the contract-3 artifact (``robot_rl.export`` does the writing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.agents import Agent
from robot_rl.config.io import train_config_to_dict
from robot_rl.config.schema import TrainConfig
from robot_rl.export import PolicyHead, export_policy, make_meta


def export_agent_policy(
    agent: Agent, env: Any, out_dir: str | Path, cfg: TrainConfig, training: dict[str, Any],
    formats: list[str] | None = None,
) -> Path:
    """Write ``agent.policy()`` (normaliser inside) with the env's robot metadata to ``out_dir``; a chunked
    policy is written whole (``chunk_length: H``) with the agent's chunk execution (``agent.policy_chunking()``).

    Args:
        env: a ``sim.VecEnv`` with ``robot`` (``sim.robots.RobotConfig``) and ``observation_layout``.
        formats: defaults to ``cfg.export_formats``.
    """
    robot = getattr(env, "robot", None)
    if robot is None or not hasattr(env, "observation_layout"):
        raise ValueError(
            f"cannot export: env {type(env).__name__} has no robot/observation_layout (a sim task env has); "
            "set export_formats=[] to skip export"
        )
    chunk_length, execution = agent.policy_chunking()
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
