"""Save and reload a resolved :class:`TrainConfig` (``<run>/config.yaml``) without Hydra.

The file holds the config plus the registry key of each polymorphic group (``agent``, ``critic``),
so loading rebuilds the same dataclasses and validates every value against them again.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from robot_rl.config.registry import config_class, key_of, registered
from robot_rl.config.schema import LoggerConfig, SimConfig, TaskConfig, TrainConfig
from robot_rl.errors import InputError

KEYED_GROUPS = ("agent", "critic")


def train_config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain-dict form of ``cfg`` with a ``keys`` entry naming each keyed group's registry key."""
    data = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    data["keys"] = {g: key_of(g, getattr(cfg, g)) for g in KEYED_GROUPS}
    return data


def train_config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Inverse of :func:`train_config_to_dict`; wrong keys or types fail naming the key."""
    data = dict(data)
    keys = data.pop("keys", None)
    if not isinstance(keys, dict) or any(g not in keys for g in KEYED_GROUPS):
        raise InputError(f"lacks the registry keys of {list(KEYED_GROUPS)}", key="keys", value=keys,
                         fix="a run's config.yaml is written by robot-rl train; restore it from a copy")
    for g in KEYED_GROUPS:
        try:
            config_class(g, keys[g])
        except (KeyError, TypeError):
            raise InputError(f"is not a registered {g}", key=f"keys.{g}", value=keys[g],
                             fix=f"use one of {registered(g)}") from None
    schema = OmegaConf.structured(TrainConfig)
    schema.task = OmegaConf.structured(TaskConfig)
    schema.sim = OmegaConf.structured(SimConfig)
    schema.logger = OmegaConf.structured(LoggerConfig)
    for g in KEYED_GROUPS:
        schema[g] = OmegaConf.structured(config_class(g, keys[g]))
    return OmegaConf.to_object(OmegaConf.merge(schema, data))


def save_train_config(cfg: TrainConfig, path: str | Path) -> Path:
    """Write ``cfg`` to ``path`` atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(train_config_to_dict(cfg), f, sort_keys=False)
    os.replace(tmp, path)
    return path


def load_train_config(path: str | Path) -> TrainConfig:
    """Read a config written by :func:`save_train_config`; :class:`InputError` naming ``path`` when it is
    missing, empty, truncated, not YAML, not a mapping, or holds a value its schema refuses."""
    from robot_rl.config import as_input_error

    path = Path(path)
    fix = "restore config.yaml from a copy (it is written once, when the run starts), or start a new run"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InputError("missing: not a run directory", file=path,
                         fix="pass a run directory, outputs/<date>/<time>") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"not readable YAML: {' '.join(str(exc).split())[:300]}", file=path, fix=fix) from None
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise InputError(f"is {what}: the run's config is truncated or was overwritten", file=path, fix=fix)
    return as_input_error(train_config_from_dict, data, file=path)
