"""Typed configs: dataclass schemas registered in Hydra's ConfigStore, values in ``configs/``.

:func:`compose` builds a :class:`TrainConfig` from the ``configs/`` tree and overrides (the same
overrides ``robot-rl train`` accepts); :func:`load_schemas` imports every module that registers a
schema, and must run before Hydra composes.
"""

from __future__ import annotations

import os
from pathlib import Path

from robot_rl.config.registry import config_class, key_of, register_config, registered
from robot_rl.config.schema import LoggerConfig, SimConfig, TaskConfig, TrainConfig

CONFIG_DIR = Path(os.environ.get("ROBOT_RL_CONFIGS", Path(__file__).resolve().parents[2] / "configs"))
"""The Hydra config tree (``configs/`` at the repository root; ``ROBOT_RL_CONFIGS`` overrides)."""


def load_schemas() -> None:
    """Import agents and critics so their ``register_*`` decorators store their schemas."""
    import robot_rl.agents
    import robot_rl.critics  # noqa: F401


def to_train_config(cfg: object) -> TrainConfig:
    """Turn a composed ``DictConfig`` into a :class:`TrainConfig` of dataclasses (validated)."""
    from omegaconf import OmegaConf

    obj = OmegaConf.to_object(cfg)
    if not isinstance(obj, TrainConfig):
        raise TypeError(f"composed config is a {type(obj).__name__}, not a TrainConfig")
    return obj


def compose(overrides: list[str] | None = None) -> TrainConfig:
    """Compose ``configs/config.yaml`` with Hydra-style ``overrides`` (no run directory, no logging)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    load_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
    return to_train_config(cfg)


__all__ = [
    "CONFIG_DIR",
    "LoggerConfig",
    "SimConfig",
    "TaskConfig",
    "TrainConfig",
    "compose",
    "config_class",
    "key_of",
    "load_schemas",
    "register_config",
    "registered",
    "to_train_config",
]
