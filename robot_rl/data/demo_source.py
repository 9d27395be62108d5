"""The demonstrations an off-policy agent learns from: settings, partition, BC start-up, resume check.

The off-policy template (:class:`robot_rl.agents.off_policy.OffPolicyAgent`) composes a :class:`DemoSource` for
RLPD (:mod:`robot_rl.agents.rlpd`) and chunked TD3 (:mod:`robot_rl.agents.chunked_td3`) alike, from the same pieces:

- :func:`check_demo_settings`: the shared ``agent.demos`` / ``demo_fraction`` / ``bc_*`` settings, checked
  when the config is read;
- :func:`demo_groups`: the observation groups the agent stores (``critic`` only when the demos recorded
  ``observation.critic``);
- :class:`DemoSource`: the read-only demo partition in the agent's ``[-1, 1]`` action box, its share of every batch
  (:meth:`DemoSource.sample`, through the one demo mixer :func:`robot_rl.data.demo_mix.sample_mixed`), how it primes
  the observation normalisers, and what a checkpoint records of it (its path and size, never the data) and checks
  again on resume;
- :func:`start_from_clone`: the BC start-up of the normalisers (the clone's statistics, then frozen).

Shapes: ``n`` demo transitions, ``B`` batch, ``A`` actions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from robot_rl.data.demo_buffer import demo_features, demo_replay
from robot_rl.data.demo_mix import demo_rows, sample_mixed
from robot_rl.data.replay_buffer import ReplayBuffer
from robot_rl.models.normalizer import EmpiricalNormalizer

Batch = TypeVar("Batch")

BC_ANCHORS = ("demos", "clone")
"""What ``agent.bc_weight`` pulls the actor towards: the demo actions, or the frozen ``bc_checkpoint`` clone."""


class DemoSettings(Protocol):
    """The demo settings of an agent config (``agent=rlpd``, ``agent=chunked_td3``)."""

    demos: str | None
    demo_fraction: float
    bc_checkpoint: str | None
    bc_weight: float
    critic_warmup_updates: int
    bc_anchor: str


def check_demo_settings(cfg: DemoSettings) -> None:
    """Refuse demo settings out of range (``ValueError`` naming the key)."""
    if not 0.0 <= cfg.demo_fraction <= 1.0:
        raise ValueError(f"agent.demo_fraction must be in [0, 1], got {cfg.demo_fraction}")
    if cfg.bc_anchor not in BC_ANCHORS:
        raise ValueError(f"agent.bc_anchor must be one of {BC_ANCHORS}, got {cfg.bc_anchor!r}")
    if cfg.bc_anchor == "clone" and not cfg.bc_checkpoint:
        raise ValueError("agent.bc_anchor=clone needs agent.bc_checkpoint=<robot-rl bc out dir> (the clone)")
    if cfg.bc_weight < 0:
        raise ValueError(f"agent.bc_weight must be >= 0, got {cfg.bc_weight}")
    if cfg.critic_warmup_updates < 0:
        raise ValueError(f"agent.critic_warmup_updates must be >= 0 (0 = off), got {cfg.critic_warmup_updates}")


def check_dataset(root: str) -> None:
    """Refuse ``agent.demos=root`` when it is not a LeRobot dataset (``FileNotFoundError``)."""
    if not (Path(root) / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"agent.demos={root} is not a LeRobot dataset (no meta/info.json); record one with "
                                "`robot-rl record --task <task> --only-success --out <dir>`")


def demo_groups(root: str, observation_dims: dict[str, int], agent: str, critic_obs: str = "auto") -> dict[str, int]:
    """The observation groups an agent learning from the demos at ``root`` stores: ``observation_dims`` without
    ``critic`` when the critic must read ``policy`` (``critic_obs=policy``, or ``auto`` and the demos did not record
    ``observation.critic``; ``auto`` says so on stderr, naming ``agent``). Refuses a ``root`` that is no dataset."""
    check_dataset(root)
    if "critic" not in observation_dims or critic_obs == "critic":
        return observation_dims
    if critic_obs == "auto" and "observation.critic" in demo_features(root):
        return observation_dims
    if critic_obs == "auto":
        print(f"{agent}: {root} has no observation.critic; the critic reads the policy observation", file=sys.stderr)
    return {"policy": observation_dims["policy"]}


class DemoSource:
    """The read-only demo partition of an agent: one-env replay of every demo frame, actions in ``[-1, 1]``.

    Args:
        root: a ``robot-rl record`` dataset directory.
        observation_dims: the groups the agent stores (:func:`demo_groups`).
        action_dim: ``A``.
        from_env_action: the agent's env units -> ``[-1, 1]`` mapping, elementwise (the demos record env units).
        fraction: share of every batch drawn from the demos (``round(fraction * B)`` rows).
        only_success: keep only demo episodes that succeeded.
        device: where the partition lives.
    """

    def __init__(self, root: str, observation_dims: dict[str, int], action_dim: int,
                 from_env_action: Callable[[torch.Tensor], torch.Tensor], fraction: float = 0.5,
                 only_success: bool = False, device: torch.device | str = "cpu") -> None:
        self.root, self.fraction = str(root), fraction
        self.buffer: ReplayBuffer = demo_replay(root, observation_dims, action_dim, device, only_success,
                                                from_env_action)

    def __len__(self) -> int:
        """Transitions in the partition."""
        return len(self.buffer)

    def rows(self, batch_size: int) -> int:
        """How many of ``batch_size`` rows come from the demos (they come first in a batch)."""
        return demo_rows(batch_size, self.fraction)

    def sample(self, draw: Callable[[ReplayBuffer, int], Batch], online: ReplayBuffer, batch_size: int) -> Batch:
        """A batch of ``batch_size`` rows: :meth:`rows` of them drawn from the demos by ``draw`` ``(buffer, n) ->
        batch``, then the rest from ``online`` (:func:`robot_rl.data.demo_mix.sample_mixed`)."""
        return sample_mixed(draw, online, self.buffer, batch_size, self.fraction)[0]

    def prime(self, normalizers: nn.ModuleDict) -> None:
        """Fold the demo observations into the agent's empirical normalisers (one per stored group)."""
        for g, norm in normalizers.items():
            if isinstance(norm, EmpiricalNormalizer):
                norm.update(self.buffer.observations(g))

    def state(self) -> dict[str, Any]:
        """What a checkpoint records of the demos: the dataset path and the number of transitions."""
        return {"path": self.root, "transitions": len(self)}

    def check_resume(self, saved: dict[str, Any] | None) -> None:
        """Refuse to resume a checkpoint whose :meth:`state` (``None``: not recorded) counts other demos."""
        if saved is not None and int(saved["transitions"]) != len(self):
            raise ValueError(f"the checkpoint trained with {saved['transitions']} demo transitions from "
                             f"{saved['path']}, agent.demos={self.root} now holds {len(self)}; point agent.demos at "
                             "the same dataset")


def start_from_clone(normalizers: nn.ModuleDict, clone_normalizer: nn.Module) -> None:
    """BC start-up: the agent's empirical normalisers of the clone's width take the clone's statistics and are frozen
    (the cloned actor only knows these)."""
    for norm in normalizers.values():
        if isinstance(norm, EmpiricalNormalizer) and norm.mean.shape == clone_normalizer.mean.shape:
            norm.load_state_dict(clone_normalizer.state_dict())
            norm.until = int(norm.count)
