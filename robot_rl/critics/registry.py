"""Critics are chosen by config key (``critic=mlp``) and built from this registry.

A family registers itself with its typed config dataclass::

    @register_critic("mlp", MLPCriticConfig)
    class MLPCritic(Critic): ...

which also stores the config schema in Hydra's ConfigStore (group ``critic``, same key), so
``configs/critic/mlp.yaml`` is validated against ``MLPCriticConfig``. Agents then call
``make_critic(cfg.critic, spec)`` and never test the critic's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from robot_rl.config.registry import key_of, register_config
from robot_rl.critics.base import Critic, CriticSpec

C = TypeVar("C", bound=type[Critic])

_CRITICS: dict[str, type[Critic]] = {}


def register_critic(key: str, config_cls: type) -> Callable[[C], C]:
    """Class decorator: make ``critic=<key>`` build this class from a ``config_cls`` instance."""

    def decorate(cls: C) -> C:
        if key in _CRITICS and _CRITICS[key] is not cls:
            raise ValueError(f"critic key {key!r} is already registered by {_CRITICS[key].__name__}")
        _CRITICS[key] = cls
        register_config("critic", key, config_cls)
        return cls

    return decorate


def critic_keys() -> list[str]:
    """Registered critic keys, sorted."""
    return sorted(_CRITICS)


def key_of_class(cls: type[Critic]) -> str:
    """The key ``cls`` is registered under (``C51Critic`` -> ``"c51"``)."""
    for key, registered in _CRITICS.items():
        if registered is cls:
            return key
    raise KeyError(f"{cls.__name__} is not a registered critic; known: {critic_keys()}")


def make_critic(cfg: object, spec: CriticSpec) -> Critic:
    """Build the critic whose registered config type is ``type(cfg)``, for the shapes in ``spec``."""
    key = key_of("critic", cfg)
    if key not in _CRITICS:
        raise KeyError(f"no critic registered under {key!r}; known: {critic_keys()}")
    return _CRITICS[key](spec, cfg)
