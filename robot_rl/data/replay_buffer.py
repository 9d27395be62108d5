"""A batched replay buffer on tensors for off-policy agents, with n-step sampling.

Storage is preallocated as ``[capacity, num_envs, ...]``: one row per control step of the whole
VecEnv, written as a ring. Every transition keeps its *true* next observation (``final_obs``
where the env was done, DESIGN.md contract 1), so time-limit bootstraps never see the next
episode's first observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robot_rl.math.td_targets import nstep_return

Obs = dict[str, torch.Tensor]


@dataclass
class ReplayBatch:
    """A sampled batch of (n-step) transitions.

    Attributes:
        obs: observation groups, each ``[B, dim]``.
        action: ``[B, action_dim]``.
        reward: ``[B]`` the discounted n-step return.
        next_obs: bootstrap observation groups, each ``[B, dim]``.
        discount: ``[B]`` bootstrap discount ``gamma ** k`` (0 after a termination).
    """

    obs: Obs
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Obs
    discount: torch.Tensor


class ReplayBuffer:
    """Ring buffer of ``capacity`` steps of ``num_envs`` envs, sampled uniformly.

    Args:
        capacity: steps per env kept (total transitions ``capacity * num_envs``).
        num_envs: envs written at every :meth:`add`.
        observation_dims: ``{group: dim}``, the groups to store (e.g. ``policy`` and ``critic``).
        action_dim: action size.
        device: where storage lives and batches are returned.
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        observation_dims: dict[str, int],
        action_dim: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 1 or num_envs < 1:
            raise ValueError(f"capacity and num_envs must be >= 1, got {capacity} and {num_envs}")
        if not observation_dims:
            raise ValueError("observation_dims is empty: pass at least {'policy': dim}")
        self.capacity = capacity
        self.num_envs = num_envs
        self.device = torch.device(device)
        shape = (capacity, num_envs)
        self.obs = {k: torch.zeros(*shape, d, device=self.device) for k, d in observation_dims.items()}
        self.next_obs = {k: torch.zeros(*shape, d, device=self.device) for k, d in observation_dims.items()}
        self.action = torch.zeros(*shape, action_dim, device=self.device)
        self.reward = torch.zeros(shape, device=self.device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.position = 0
        """Row written by the next :meth:`add`."""
        self.size = 0
        """Rows holding data, at most ``capacity``."""

    def __len__(self) -> int:
        """Number of stored transitions (all envs)."""
        return self.size * self.num_envs

    def state_dict(self) -> dict:
        """Every stored tensor and the write position, for a checkpoint."""
        return {
            "obs": dict(self.obs), "next_obs": dict(self.next_obs), "action": self.action, "reward": self.reward,
            "terminated": self.terminated, "truncated": self.truncated, "position": self.position, "size": self.size,
        }

    def load_state_dict(self, saved: dict) -> None:
        """Restore :meth:`state_dict` into this buffer's (same-shaped) storage."""
        for name in ("obs", "next_obs"):
            for group, store in getattr(self, name).items():
                store.copy_(saved[name][group])
        for name in ("action", "reward", "terminated", "truncated"):
            getattr(self, name).copy_(saved[name])
        self.position, self.size = int(saved["position"]), int(saved["size"])

    def add(
        self,
        obs: Obs,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Obs,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> None:
        """Store one step of every env.

        Args:
            obs: groups ``[num_envs, dim]`` seen before acting.
            action: ``[num_envs, action_dim]``.
            reward: ``[num_envs]``.
            next_obs: true next observation groups ``[num_envs, dim]`` (``final_obs`` where done).
            terminated: ``[num_envs]`` bool.
            truncated: ``[num_envs]`` bool.
        """
        row = self.position
        for key, store in self.obs.items():
            if key not in obs or key not in next_obs:
                raise KeyError(f"observation group {key!r} missing from the transition; got {sorted(obs)}")
            store[row] = obs[key]
            self.next_obs[key][row] = next_obs[key]
        self.action[row] = action
        self.reward[row] = reward
        self.terminated[row] = terminated
        self.truncated[row] = truncated
        self.position = (row + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    @staticmethod
    def true_next_obs(next_obs: Obs, final_obs: Obs, done: torch.Tensor) -> Obs:
        """Replace the post-reset rows of ``next_obs`` by ``final_obs`` where ``done`` ([N] bool)."""
        return {k: torch.where(done[:, None], final_obs[k], v) for k, v in next_obs.items()}

    def sample(
        self,
        batch_size: int,
        n_step: int = 1,
        gamma: float = 0.99,
        generator: torch.Generator | None = None,
    ) -> ReplayBatch:
        """Sample ``batch_size`` transitions uniformly, each with its n-step return.

        A window stops at the first termination or truncation, and at the newest stored row
        (bootstrapping there with fewer than ``n_step`` rewards), so every stored transition can
        be drawn.
        """
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer: add transitions first")
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        gen_device = generator.device if generator is not None else self.device
        oldest = (self.position - self.size) % self.capacity
        offset = torch.randint(0, self.size, (batch_size,), generator=generator, device=gen_device)
        env = torch.randint(0, self.num_envs, (batch_size,), generator=generator, device=gen_device)
        offset, env = offset.to(self.device), env.to(self.device)
        if n_step == 1:
            return self._sample_one_step(oldest, offset, env, gamma)
        steps = torch.arange(n_step, device=self.device)
        window_offset = offset[:, None] + steps[None, :]  # [B, n]
        in_buffer = window_offset < self.size
        rows = (oldest + window_offset.clamp(max=self.size - 1)) % self.capacity
        envs = env[:, None].expand(-1, n_step)
        newest = window_offset == self.size - 1
        target = nstep_return(
            self.reward[rows, envs] * in_buffer,
            self.terminated[rows, envs] & in_buffer,
            (self.truncated[rows, envs] | newest) & in_buffer,
            gamma,
        )
        first = rows[:, 0]
        bootstrap_row = rows.gather(1, target.last[:, None]).squeeze(1)
        return ReplayBatch(
            obs={k: v[first, env] for k, v in self.obs.items()},
            action=self.action[first, env],
            reward=target.returns,
            next_obs={k: v[bootstrap_row, env] for k, v in self.next_obs.items()},
            discount=target.discount,
        )

    def _sample_one_step(self, oldest: int, offset: torch.Tensor, env: torch.Tensor, gamma: float) -> ReplayBatch:
        """:meth:`sample` for ``n_step = 1`` (the same batch, with fewer ops): the reward itself, bootstrap from
        the transition's own next observation with discount ``gamma`` (0 after a termination).

        Each stored tensor is gathered by one ``index_select`` on its ``[capacity * num_envs, ...]`` view.
        """
        flat = ((oldest + offset) % self.capacity) * self.num_envs + env  # [B]

        def take(store: torch.Tensor) -> torch.Tensor:
            return store.flatten(0, 1).index_select(0, flat)

        return ReplayBatch(
            obs={k: take(v) for k, v in self.obs.items()},
            action=take(self.action),
            reward=take(self.reward),
            next_obs={k: take(v) for k, v in self.next_obs.items()},
            discount=gamma * (~take(self.terminated)).to(self.reward.dtype),
        )
