"""Agents, one algorithm per file, selected by config key (``agent=ppo``).

Every module in this package is imported here so its ``@register_agent`` runs; adding an agent
is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil

from robot_rl.agents.base import Agent, BasePolicy, EnvSpec, agent_class, agent_keys, make_agent, register_agent

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["Agent", "BasePolicy", "EnvSpec", "agent_class", "agent_keys", "make_agent", "register_agent"]
