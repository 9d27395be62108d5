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

from robot_rl.config.registry import Registry
from robot_rl.critics.base import Critic, CriticSpec

C = TypeVar("C", bound=type[Critic])

_CRITICS: Registry[type[Critic]] = Registry("critic")


def register_critic(key: str, config_cls: type) -> Callable[[C], C]:
    """Class decorator: make ``critic=<key>`` build this class from a ``config_cls`` instance."""
    return _CRITICS.register(key, config_cls)


def critic_keys() -> list[str]:
    """Registered critic keys, sorted."""
    return _CRITICS.keys()


def key_of_class(cls: type[Critic]) -> str:
    """The key ``cls`` is registered under (``C51Critic`` -> ``"c51"``)."""
    return _CRITICS.key_of_class(cls)


def make_critic(cfg: object, spec: CriticSpec) -> Critic:
    """Build the critic whose registered config type is ``type(cfg)``, for the shapes in ``spec``."""
    return _CRITICS.class_of(cfg)(spec, cfg)
