"""A ``robot-rl record`` dataset as a read-only, one-env replay buffer (the demo partition of an agent).

:func:`demo_replay` loads it; :class:`robot_rl.data.demo_source.DemoSource` composes it into an agent and
:mod:`robot_rl.data.demo_mix` mixes it into the agent's batches.

Shapes: ``N`` demo transitions, ``D_g`` size of observation group ``g``, ``A`` actions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.replay_buffer import ReplayBuffer
from robot_rl.data.transitions import demo_transitions


def demo_features(root: str | Path) -> set[str]:
    """Feature names of dataset ``root`` (metadata only)."""
    return set(LeRobotDataset(root).features)


def demo_replay(
    root: str | Path,
    observation_dims: dict[str, int],
    action_dim: int,
    device: torch.device | str = "cpu",
    only_success: bool = False,
    action_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> ReplayBuffer:
    """A full one-env :class:`ReplayBuffer` holding every frame of a ``robot-rl record`` dataset.

    Group ``policy`` comes from ``observation.policy``; any other group ``g`` needs the columns
    ``observation.g`` and ``next.observation.g``. Episodes follow each other in the buffer; each ends in
    a termination or truncation, so n-step windows never run across two episodes. Actions are the recorded
    policy actions (``action.policy``) in env units, as the env took them, or ``action_map(actions)`` (``[n, 1, A]``
    elementwise, e.g. an agent's ``from_env_action`` into its normalised ``[-1, 1]`` box; the env's bounds need not
    be ``[-1, 1]``).
    """
    t = demo_transitions(root, only_success=only_success)
    n = len(t["reward"])
    if n == 0:
        raise ValueError(f"{root} holds no demo transitions (only_success={only_success}); record demos first")
    ds = LeRobotDataset(root) if set(observation_dims) - {"policy"} else None
    obs, next_obs = {}, {}
    for group in observation_dims:
        if group == "policy":
            obs[group], next_obs[group] = t["obs"], t["next_obs"]
            continue
        keys = (f"observation.{group}", f"next.observation.{group}")
        assert ds is not None
        missing = [k for k in keys if k not in ds.features]
        if missing:
            raise KeyError(f"{root} has no {missing}: demos can feed group {group!r} only if recorded; use "
                           "agent.critic_obs=policy (the critic reads the policy observation)")
        keep = np.isin(ds.column("episode_index"), np.unique(t["episode"]))
        obs[group], next_obs[group] = ds.column(keys[0])[keep], ds.column(keys[1])[keep]
    for group, dim in observation_dims.items():
        if obs[group].shape[1] != dim:
            raise ValueError(f"{root}: demo observation group {group!r} has {obs[group].shape[1]} values, the env "
                             f"{dim}; record the demos on the same task")
    if t["action"].shape[1] != action_dim:
        raise ValueError(f"{root}: demo actions have {t['action'].shape[1]} dims, the env {action_dim}")
    buffer = ReplayBuffer(n, 1, observation_dims, action_dim, device)

    def rows(x: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:  # [n, ...] -> [n, 1 env, ...]
        return torch.as_tensor(np.asarray(x), device=buffer.device).to(dtype)[:, None]

    action = rows(t["action"])
    buffer.extend({g: rows(obs[g]) for g in observation_dims}, action if action_map is None else action_map(action),
                  rows(t["reward"]), {g: rows(next_obs[g]) for g in observation_dims},
                  rows(t["terminated"], torch.bool), rows(t["truncated"], torch.bool))
    return buffer
