"""Critic families behind one interface (:class:`Critic`), selected by config key (``critic=...``).

Every module in this package is imported here so its ``@register_critic`` runs; adding a family
is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil

from robot_rl.critics.base import Critic, CriticSpec, reduce_members
from robot_rl.critics.registry import critic_keys, make_critic, register_critic

for _info in pkgutil.iter_modules(__path__):
    if _info.name not in ("base", "registry") and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["Critic", "CriticSpec", "critic_keys", "make_critic", "reduce_members", "register_critic"]
