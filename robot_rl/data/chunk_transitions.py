"""A ring buffer of chunk-level transitions: one row per executed action chunk (semi-MDP steps).

An agent that acts once per chunk (noise steering of a VLA, ``agent=vla_rl``) learns from transitions
``(obs, action, reward, discount, next_obs)`` where ``reward`` sums the chunk's discounted env rewards
``sum_k gamma^k r_k`` and ``discount`` is ``gamma^K`` after ``K`` executed steps, 0 where the episode ended inside
the chunk. Rows are written in any order and any number at a time (envs finish their chunks at different steps).

Shapes: ``n`` rows written, ``B`` sampled, ``D`` observation, ``A`` (flattened) action.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FIELDS = ("obs", "action", "reward", "discount", "next_obs")


@dataclass
class ChunkTransitions:
    """A sampled batch: ``obs [B, D]``, ``action [B, A]``, ``reward [B]``, ``discount [B]``, ``next_obs [B, D]``."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor


class ChunkTransitionBuffer:
    """``capacity`` rows of :class:`ChunkTransitions` fields; the oldest are overwritten first."""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int, device: str | torch.device = "cpu") -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.store = {
            "obs": torch.zeros(capacity, obs_dim, device=device),
            "action": torch.zeros(capacity, action_dim, device=device),
            "reward": torch.zeros(capacity, device=device),
            "discount": torch.zeros(capacity, device=device),
            "next_obs": torch.zeros(capacity, obs_dim, device=device),
        }
        self.cursor = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
            next_obs: torch.Tensor) -> None:
        """Write ``n`` rows: ``obs [n, D]``, ``action [n, A]``, ``reward [n]``, ``discount [n]``,
        ``next_obs [n, D]``."""
        n = obs.shape[0]
        if n == 0:
            return
        if n > self.capacity:
            raise ValueError(f"cannot add {n} rows to a buffer of {self.capacity}")
        rows = (self.cursor + torch.arange(n)) % self.capacity
        for key, value in zip(FIELDS, (obs, action, reward, discount, next_obs), strict=True):
            self.store[key][rows.to(self.store[key].device)] = value.detach().to(self.store[key].dtype)
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ChunkTransitions:
        """``batch_size`` rows drawn uniformly with replacement."""
        if self.size == 0:
            raise ValueError("cannot sample an empty buffer")
        rows = torch.randint(0, self.size, (batch_size,), generator=generator)
        return ChunkTransitions(**{k: v[rows.to(v.device)] for k, v in self.store.items()})

    def state_dict(self) -> dict:
        """The filled rows and the cursor (tensors and ints)."""
        return {**{k: v[: self.size].clone() for k, v in self.store.items()}, "cursor": self.cursor,
                "size": self.size}

    def load_state_dict(self, saved: dict) -> None:
        """Restore :meth:`state_dict` into a buffer of the same capacity and widths."""
        size = int(saved["size"])
        if size > self.capacity:
            raise ValueError(f"saved buffer holds {size} rows; this one has room for {self.capacity}")
        for key in FIELDS:
            self.store[key][:size] = saved[key]
        self.size, self.cursor = size, int(saved["cursor"])
