"""The act -> step -> observe -> update loop the agent tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from robot_rl.agents.base import Agent


def drive(
    agent: Agent,
    env: Any,
    steps: int,
    obs: Any = None,
    seed: int = 0,
    on_update: Callable[[dict[str, Any]], Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Run ``steps`` vector steps from ``obs`` (``env.reset(seed=seed)`` when None), updating whenever the agent
    is ready (``on_update`` sees every update's metrics, e.g. ``history.append``); returns the last observation
    and the metrics of the last update (``{}`` if none ran)."""
    obs = env.reset(seed=seed) if obs is None else obs
    metrics: dict[str, Any] = {}
    for _ in range(steps):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            metrics = agent.update()
            if on_update is not None:
                on_update(metrics)
    return obs, metrics
