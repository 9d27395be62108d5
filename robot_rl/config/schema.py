"""Schemas of the groups every run has (task, sim, logger) and of the run itself (``TrainConfig``).

Agent and critic schemas live next to their code and register themselves
(:func:`robot_rl.config.registry.register_config`); the values live in ``configs/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from robot_rl.config.registry import register_config


@dataclass
class TaskConfig:
    """Which environment to train on and for how long.

    Attributes:
        name: a ``sim.list_tasks()`` name (``so101_reach``).
        num_envs: parallel environments ``N``.
        total_steps: training budget in environment steps (summed over envs).
        env: extra keyword overrides passed to ``sim.make_env`` (task-specific).
    """

    name: str = MISSING
    num_envs: int = 64
    total_steps: int = 1_000_000
    env: dict[str, Any] = field(default_factory=dict)


@dataclass
class SimConfig:
    """Where the simulation runs.

    Attributes:
        device: torch device of the env tensors and the networks (``cpu``, ``cuda``).
        num_threads: torch intra-op threads for the networks (0 = torch's default).
    """

    device: str = "cpu"
    num_threads: int = 0


@dataclass
class LoggerConfig:
    """Where training metrics go.

    Attributes:
        backends: any of ``tensorboard``, ``wandb`` (empty = console and progress bar only).
        wandb_project: W&B project name when ``wandb`` is a backend.
        progress: show the live progress bar (steps/s, return, success, ETA).
    """

    backends: list[str] = field(default_factory=lambda: ["tensorboard"])
    wandb_project: str = "robot_rl"
    progress: bool = True


@dataclass
class TrainConfig:
    """One training run: the composed groups plus the runner's own settings.

    Attributes:
        task, agent, critic, sim, logger: the selected option of each config group.
        seed: seeds the env, torch and the agent.
        resume: a run directory to continue from its last checkpoint (its config is reused).
        checkpoint_interval: agent updates between checkpoints.
        eval_episodes: episodes of the final deterministic evaluation (0 = skip).
        export_formats: policy artifact formats written at the end (``onnx``, ``torchscript``).
    """

    task: Any = MISSING
    agent: Any = MISSING
    critic: Any = MISSING
    sim: Any = MISSING
    logger: Any = MISSING
    seed: int = 0
    resume: str | None = None
    checkpoint_interval: int = 25
    eval_episodes: int = 100
    export_formats: list[str] = field(default_factory=lambda: ["onnx", "torchscript"])


register_config("task", "base", TaskConfig)
register_config("sim", "base", SimConfig)
register_config("logger", "base", LoggerConfig)
register_config("train", "base", TrainConfig)
