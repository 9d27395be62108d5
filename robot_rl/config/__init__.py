"""Typed configs: dataclass schemas registered in Hydra's ConfigStore, values in ``configs/``.

This package imports no agent or critic: they register their schemas here when imported.
:func:`robot_rl.compose.compose` builds a :class:`TrainConfig` from the ``configs/`` tree and overrides (the
same overrides ``robot-rl train`` accepts) after :func:`robot_rl.compose.load_schemas` imported them.
"""

from __future__ import annotations

import os
from pathlib import Path

from robot_rl.config.registry import config_class, key_of, register_config, registered
from robot_rl.config.schema import LoggerConfig, SimConfig, TaskConfig, TrainConfig
from robot_rl.errors import InputError

CONFIG_DIR = Path(os.environ.get("ROBOT_RL_CONFIGS", Path(__file__).resolve().parents[2] / "configs"))
"""The Hydra config tree (``configs/`` at the repository root; ``ROBOT_RL_CONFIGS`` overrides)."""


def unknown_keys(node: object, obj: object, prefix: str = "") -> list[str]:
    """Keys of a composed config ``node`` that its dataclass ``obj`` has no field for (recursively).

    ``+group.key=value`` forces a new key into a typed node; ``OmegaConf.to_object`` would drop
    it silently, so it is reported instead.
    """
    from dataclasses import fields, is_dataclass

    from omegaconf import DictConfig

    if not (isinstance(node, DictConfig) and is_dataclass(obj)):
        return []
    names = {f.name for f in fields(obj)}
    found = [f"{prefix}{k}" for k in node.keys() if k not in names and k != "hydra"]
    for k in names & set(node.keys()):
        found += unknown_keys(node[k], getattr(obj, k), f"{prefix}{k}.")
    return found


def to_train_config(cfg: object) -> TrainConfig:
    """Turn a composed ``DictConfig`` into a :class:`TrainConfig` of dataclasses (validated).

    Raises :class:`robot_rl.errors.InputError` for a value a schema refuses (its ``__post_init__``).
    """
    from omegaconf import OmegaConf

    obj = as_input_error(OmegaConf.to_object, cfg)
    if not isinstance(obj, TrainConfig):
        raise TypeError(f"composed config is a {type(obj).__name__}, not a TrainConfig")
    extra = unknown_keys(cfg, obj)
    if extra:
        raise InputError("no such field in their schema", key=", ".join(extra),
                         fix="check the spelling; `robot-rl train --help` lists every key")
    return obj


def as_input_error(fn, *args, file: object = None):
    """``fn(*args)``; a ``ValueError`` from a schema's ``__post_init__`` or an OmegaConf type/merge error
    becomes an :class:`InputError` (naming ``file`` when given), since both mean a bad config value."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return fn(*args)
    except InputError as exc:
        if file is None or exc.file is not None:
            raise
        raise InputError(exc.problem, file=file, key=exc.key, value=exc.value, fix=exc.fix) from None
    except (ValueError, OmegaConfBaseException) as exc:
        raise InputError(" ".join(str(exc).split()), file=file,
                         fix="correct the value (`robot-rl train --help` lists every key)") from None


__all__ = [
    "CONFIG_DIR",
    "LoggerConfig",
    "SimConfig",
    "TaskConfig",
    "TrainConfig",
    "as_input_error",
    "config_class",
    "key_of",
    "register_config",
    "registered",
    "to_train_config",
]
