"""Typed config schemas, registered in Hydra's ConfigStore under the option's registry key.

``register_config("agent", "ppo", PPOConfig)`` stores ``PPOConfig`` as ``schema/agent/ppo``. The
option file ``configs/agent/ppo.yaml`` starts with::

    defaults:
      - /schema/agent/ppo@_here_
      - _self_

so Hydra validates it (and every command-line override of it) against the dataclass: an unknown
key or a wrong type fails with a message naming the full key (``agent.learning_rate``). After
composition ``OmegaConf.to_object`` turns each group into its dataclass, and :func:`key_of` maps the
instance back to its key (``"ppo"``), so builders dispatch by dictionary lookup, never by type tests.
"""

from __future__ import annotations

from dataclasses import is_dataclass

from hydra.core.config_store import ConfigStore

_BY_KEY: dict[tuple[str, str], type] = {}
_BY_CLASS: dict[tuple[str, type], str] = {}


def register_config(group: str, key: str, cls: type) -> None:
    """Register dataclass ``cls`` as the schema of option ``<group>=<key>``."""
    if not is_dataclass(cls):
        raise TypeError(f"config schema for {group}={key} must be a dataclass, got {cls!r}")
    old = _BY_KEY.get((group, key))
    if old is not None and old is not cls:
        raise ValueError(f"{group}={key} is already registered with {old.__name__}")
    _BY_KEY[(group, key)] = cls
    _BY_CLASS[(group, cls)] = key
    ConfigStore.instance().store(group=f"schema/{group}", name=key, node=cls)


def config_class(group: str, key: str) -> type:
    """The schema dataclass of ``<group>=<key>``."""
    try:
        return _BY_KEY[(group, key)]
    except KeyError:
        known = sorted(k for g, k in _BY_KEY if g == group)
        raise KeyError(f"no {group} config registered under {key!r}; known: {known}") from None


def key_of(group: str, cfg: object) -> str:
    """The registry key whose schema is ``type(cfg)`` within ``group``."""
    try:
        return _BY_CLASS[(group, type(cfg))]
    except KeyError:
        raise KeyError(
            f"{type(cfg).__name__} is not a registered {group} config; register it with "
            f"register_config({group!r}, '<key>', {type(cfg).__name__})"
        ) from None


def registered(group: str) -> list[str]:
    """Keys registered in ``group``, sorted."""
    return sorted(k for g, k in _BY_KEY if g == group)
