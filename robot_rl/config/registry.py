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
:class:`Registry` is that lookup for one group's classes (agents, critics): a class decorator that also
registers the schema, and the class of a config instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Generic, TypeVar

from hydra.core.config_store import ConfigStore

T = TypeVar("T", bound=type)
S = TypeVar("S", bound=type)

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


class Registry(Generic[T]):
    """The classes of config group ``group`` (``"agent"``, ``"critic"``), by registry key."""

    def __init__(self, group: str):
        self.group = group
        self._classes: dict[str, T] = {}

    def register(self, key: str, config_cls: type) -> Callable[[S], S]:
        """Class decorator: ``<group>=<key>`` builds this class from a ``config_cls`` instance (the schema is
        registered with :func:`register_config`)."""

        def decorate(cls: S) -> S:
            old = self._classes.get(key)
            if old is not None and old is not cls:
                raise ValueError(f"{self.group} key {key!r} is already registered by {old.__name__}")
            self._classes[key] = cls
            register_config(self.group, key, config_cls)
            return cls

        return decorate

    def keys(self) -> list[str]:
        """Registered keys, sorted."""
        return sorted(self._classes)

    def class_of(self, cfg: object) -> T:
        """The class registered for the config instance ``cfg``."""
        key = key_of(self.group, cfg)
        if key not in self._classes:
            raise KeyError(f"no {self.group} registered under {key!r}; known: {self.keys()}")
        return self._classes[key]

    def key_of_class(self, cls: type) -> str:
        """The key ``cls`` is registered under."""
        for key, registered_cls in self._classes.items():
            if registered_cls is cls:
                return key
        raise KeyError(f"{cls.__name__} is not a registered {self.group}; known: {self.keys()}")
