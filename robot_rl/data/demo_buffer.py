"""Replay with a separate, fixed demonstration partition, sampled symmetrically (RLPD).

Ball et al., "Efficient Online Reinforcement Learning with Offline Data" (RLPD, ICML 2023): every batch
is half demo transitions and half online transitions, each half drawn uniformly from its own
partition. :class:`DemoMixReplay` *is* the online :class:`ReplayBuffer` (``add``, ``len``, checkpoint
state cover only online data) with a read-only demo buffer beside it; :meth:`DemoMixReplay.sample`
returns the demo rows first, then the online rows, never mixing storage.

Shapes: ``N`` demo transitions, ``B`` batch, ``D_g`` size of observation group ``g``, ``A`` actions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.replay_buffer import ReplayBatch, ReplayBuffer
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
) -> ReplayBuffer:
    """A full one-env :class:`ReplayBuffer` holding every frame of a ``robot-rl record`` dataset.

    Group ``policy`` comes from ``observation.policy``; any other group ``g`` needs the columns
    ``observation.g`` and ``next.observation.g``. Episodes follow each other in the buffer; each ends in
    a termination or truncation, so n-step windows never run across two episodes. Actions are the recorded
    policy actions (``action.policy``) in env units, as the env took them; an agent maps them into its
    normalised ``[-1, 1]`` box with its ``from_env_action`` (the env's bounds need not be ``[-1, 1]``).
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
    as_tensor = lambda x: torch.as_tensor(np.asarray(x), device=buffer.device)  # noqa: E731
    for group in observation_dims:
        buffer.obs[group][:, 0] = as_tensor(obs[group]).float()
        buffer.next_obs[group][:, 0] = as_tensor(next_obs[group]).float()
    buffer.action[:, 0] = as_tensor(t["action"]).float()
    buffer.reward[:, 0] = as_tensor(t["reward"]).float()
    buffer.terminated[:, 0] = as_tensor(t["terminated"]).bool()
    buffer.truncated[:, 0] = as_tensor(t["truncated"]).bool()
    buffer.position, buffer.size = 0, n
    return buffer


class DemoMixReplay(ReplayBuffer):
    """Online replay (this buffer) plus a fixed demo partition; batches are ``demo_fraction`` demos.

    Args:
        capacity, num_envs, observation_dims, action_dim, device: the online partition (see
            :class:`ReplayBuffer`).
        demos: the demo partition (e.g. :func:`demo_replay`), same groups and action size.
        demo_fraction: share of every batch drawn from ``demos`` (``round(fraction * B)`` rows; RLPD: 0.5).
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        observation_dims: dict[str, int],
        action_dim: int,
        demos: ReplayBuffer,
        demo_fraction: float = 0.5,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(capacity, num_envs, observation_dims, action_dim, device)
        if not 0.0 <= demo_fraction <= 1.0:
            raise ValueError(f"demo_fraction must be in [0, 1], got {demo_fraction}")
        if set(demos.obs) != set(self.obs) or demos.action.shape[-1] != action_dim:
            raise ValueError(f"demo partition groups {sorted(demos.obs)} / {demos.action.shape[-1]} actions do not "
                             f"match the online {sorted(self.obs)} / {action_dim}")
        self.demos = demos
        self.demo_fraction = demo_fraction

    def demo_rows(self, batch_size: int) -> int:
        """How many of ``batch_size`` rows come from the demo partition."""
        return round(batch_size * self.demo_fraction)

    def sample(
        self,
        batch_size: int,
        n_step: int = 1,
        gamma: float = 0.99,
        generator: torch.Generator | None = None,
    ) -> ReplayBatch:
        """``demo_rows(B)`` demo transitions, then ``B - demo_rows(B)`` online ones (each uniform in its partition)."""
        n_demo = self.demo_rows(batch_size)
        parts = []
        if n_demo:
            parts.append(self.demos.sample(n_demo, n_step, gamma, generator))
        if batch_size - n_demo:
            parts.append(super().sample(batch_size - n_demo, n_step, gamma, generator))
        if len(parts) == 1:
            return parts[0]
        demo, online = parts
        return ReplayBatch(
            obs={k: torch.cat([demo.obs[k], online.obs[k]]) for k in online.obs},
            action=torch.cat([demo.action, online.action]),
            reward=torch.cat([demo.reward, online.reward]),
            next_obs={k: torch.cat([demo.next_obs[k], online.next_obs[k]]) for k in online.next_obs},
            discount=torch.cat([demo.discount, online.discount]),
        )
