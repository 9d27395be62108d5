"""A batched replay buffer on tensors for off-policy agents, and every way of sampling it.

Storage is preallocated as ``[capacity, num_envs, ...]``: one row per control step of the whole
VecEnv, written as a ring. Every transition keeps its *true* next observation (``final_obs``
where the env was done, DESIGN.md contract 1), so time-limit bootstraps never see the next
episode's first observation.

The buffer's public calls are the only readers of its storage:

- :meth:`ReplayBuffer.sample`: transitions with their n-step returns (:class:`ReplayBatch`);
- :meth:`ReplayBuffer.sample_chunks`: ``h`` consecutive steps of one env with their chunk return
  (:class:`ChunkBatch`, the targets of :mod:`robot_rl.math.chunk_targets`);
- :meth:`ReplayBuffer.sample_windows`: ``T`` consecutive steps, time-major, for latent rollouts (:class:`WindowBatch`);
- :meth:`ReplayBuffer.next_obs_at`: the stored true next observations of sampled steps;
- :meth:`ReplayBuffer.observations`: every stored observation of a group (e.g. to prime a normaliser).

Writes go through :meth:`ReplayBuffer.add` (one step of every env) and :meth:`ReplayBuffer.extend` (many steps).

Every sampler draws a start row uniformly over the stored rows, then an env, from ``generator`` (the global
torch RNG when None). Demo partitions are mixed in by :mod:`robot_rl.data.demo_mix`.

Shapes: ``B`` batch, ``h`` chunk length, ``T`` window, ``A`` actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robot_rl.math.chunk_targets import ChunkReturn, OnTruncation, alive_mask, chunk_return
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


@dataclass
class ChunkBatch:
    """Chunks of ``h`` consecutive steps of one env, with their chunk returns (:meth:`ReplayBuffer.sample_chunks`).

    Attributes:
        obs: observation groups at the chunk's first step, each ``[B, dim]``.
        actions: ``[B, h, A]`` stored actions; steps after the episode end repeat the last executed one.
        rewards: ``[B, h]`` stored rewards (zero after the end).
        target: :class:`~robot_rl.math.chunk_targets.ChunkReturn` of the chunk.
        next_obs: bootstrap observation groups (true next obs of step ``target.last``), each ``[B, dim]``.
        terminated, truncated: ``[B, h]`` bool flags of the chunk's steps as
            :func:`~robot_rl.math.chunk_targets.chunk_return` saw them (the newest stored step counts as truncated).
        rows, env: where the chunk lies in its buffer: ``[B, h]`` ring rows of its steps (clamped at the newest)
            and ``[B]`` env index (:meth:`ReplayBuffer.next_obs_at` reads per-step next observations with them).
    """

    obs: Obs
    actions: torch.Tensor
    rewards: torch.Tensor
    target: ChunkReturn
    next_obs: Obs
    terminated: torch.Tensor
    truncated: torch.Tensor
    rows: torch.Tensor
    env: torch.Tensor


@dataclass
class WindowBatch:
    """Windows of ``T`` consecutive steps of one env, time-major, for latent-rollout training (TD-MPC2).

    Attributes:
        obs: observation groups ``[T + 1, B, dim]``: the first step's observation, then the true next
            observation of every step (``final_obs`` where that step ended its episode).
        actions: ``[T, B, A]``; rewards: ``[T, B]``; terminated: ``[T, B]`` bool.
        alive: ``[T, B]`` bool, the step is stored and belongs to the window's episode (steps up to and
            including the first termination or truncation); later steps must stay out of every loss.
    """

    obs: Obs
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    alive: torch.Tensor


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
        self.observation_dims = dict(observation_dims)
        """``{group: dim}`` of the stored groups."""
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

    def extend(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, next_obs: Obs, terminated: torch.Tensor,
               truncated: torch.Tensor) -> None:
        """Store ``n <= capacity`` consecutive steps of every env at once (what ``n`` :meth:`add` calls store).

        Args:
            obs, next_obs: groups ``[n, num_envs, dim]`` (``next_obs`` the true next observations).
            action: ``[n, num_envs, action_dim]``; reward, terminated, truncated: ``[n, num_envs]``.
        """
        n = action.shape[0]
        if not 1 <= n <= self.capacity:
            raise ValueError(f"extend needs 1..{self.capacity} steps, got {n}")
        rows = (self.position + torch.arange(n, device=self.device)) % self.capacity
        for key, store in self.obs.items():
            store[rows] = obs[key].to(self.device, store.dtype)
            self.next_obs[key][rows] = next_obs[key].to(self.device, store.dtype)
        self.action[rows] = action.to(self.device, self.action.dtype)
        self.reward[rows] = reward.to(self.device, self.reward.dtype)
        self.terminated[rows] = terminated.to(self.device, torch.bool)
        self.truncated[rows] = truncated.to(self.device, torch.bool)
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def observations(self, group: str) -> torch.Tensor:
        """Every stored observation of ``group``, oldest step first, envs within a step: ``[len(self), dim]``."""
        rows = (self.position - self.size + torch.arange(self.size, device=self.device)) % self.capacity
        return self.obs[group][rows].flatten(0, 1)

    @staticmethod
    def true_next_obs(next_obs: Obs, final_obs: Obs, done: torch.Tensor) -> Obs:
        """Replace the post-reset rows of ``next_obs`` by ``final_obs`` where ``done`` ([N] bool)."""
        return {k: torch.where(done[:, None], final_obs[k], v) for k, v in next_obs.items()}

    def _draw(self, batch_size: int, length: int, generator: torch.Generator | None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Uniform start offsets (from the oldest stored row) and envs, then ``length`` steps from each.

        Returns:
            ``(window [B, length] offsets from the oldest row, rows [B, length] ring rows clamped at the newest
            stored one, env [B])``.
        """
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer: add transitions first")
        gen_device = generator.device if generator is not None else self.device
        oldest = (self.position - self.size) % self.capacity
        offset = torch.randint(0, self.size, (batch_size,), generator=generator, device=gen_device).to(self.device)
        env = torch.randint(0, self.num_envs, (batch_size,), generator=generator, device=gen_device).to(self.device)
        window = offset[:, None] + torch.arange(length, device=self.device)[None, :]
        rows = (oldest + window.clamp(max=self.size - 1)) % self.capacity
        return window, rows, env

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
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        window, rows, env = self._draw(batch_size, n_step, generator)
        if n_step == 1:
            return self._one_step(rows[:, 0], env, gamma)
        in_buffer = window < self.size
        envs = env[:, None].expand(-1, n_step)
        newest = window == self.size - 1
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

    def _one_step(self, row: torch.Tensor, env: torch.Tensor, gamma: float) -> ReplayBatch:
        """:meth:`sample` for ``n_step = 1`` (the same batch, with fewer ops): the reward itself, bootstrap from
        the transition's own next observation with discount ``gamma`` (0 after a termination).

        Each stored tensor is gathered by one ``index_select`` on its ``[capacity * num_envs, ...]`` view.
        """
        flat = row * self.num_envs + env  # [B]

        def take(store: torch.Tensor) -> torch.Tensor:
            return store.flatten(0, 1).index_select(0, flat)

        return ReplayBatch(
            obs={k: take(v) for k, v in self.obs.items()},
            action=take(self.action),
            reward=take(self.reward),
            next_obs={k: take(v) for k, v in self.next_obs.items()},
            discount=gamma * (~take(self.terminated)).to(self.reward.dtype),
        )

    def sample_chunks(
        self,
        batch_size: int,
        chunk_len: int,
        gamma: float,
        on_truncation: OnTruncation = "bootstrap",
        generator: torch.Generator | None = None,
    ) -> ChunkBatch:
        """Sample ``batch_size`` chunks of ``chunk_len`` consecutive steps of one env, with their chunk returns
        (:func:`~robot_rl.math.chunk_targets.chunk_return`). The newest stored step ends a chunk like a truncation.
        """
        if chunk_len < 1 or batch_size < 1:
            raise ValueError(f"chunk_len and batch_size must be >= 1, got {chunk_len} and {batch_size}")
        window, rows, env = self._draw(batch_size, chunk_len, generator)
        stored = window < self.size
        envs = env[:, None].expand(-1, chunk_len)
        terminated = self.terminated[rows, envs] & stored
        truncated = (self.truncated[rows, envs] | (window == self.size - 1)) & stored
        rewards = self.reward[rows, envs] * stored
        target = chunk_return(rewards, terminated, truncated, gamma, on_truncation)
        executed = torch.arange(chunk_len, device=self.device)[None, :] <= target.last[:, None]
        last_row = rows.gather(1, target.last[:, None])
        action_rows = torch.where(executed, rows, last_row)
        first = rows[:, 0]
        return ChunkBatch(
            obs={k: v[first, env] for k, v in self.obs.items()},
            actions=self.action[action_rows, envs],
            rewards=rewards * executed,
            target=target,
            next_obs={k: v[last_row.squeeze(1), env] for k, v in self.next_obs.items()},
            terminated=terminated,
            truncated=truncated,
            rows=rows,
            env=env,
        )

    def sample_windows(self, batch_size: int, horizon: int, generator: torch.Generator | None = None) -> WindowBatch:
        """Sample ``batch_size`` windows of ``horizon`` consecutive steps of one env, time-major.

        Unlike :meth:`sample_chunks` the newest stored step is a normal step here: its true next observation
        is stored, so a latent rollout may pass through it; steps beyond it are not stored (``alive`` False).
        """
        if horizon < 1 or batch_size < 1:
            raise ValueError(f"horizon and batch_size must be >= 1, got {horizon} and {batch_size}")
        window, rows, env = self._draw(batch_size, horizon, generator)
        stored, rows = (window < self.size).T, rows.T  # [T, B]
        envs = env[None, :].expand(horizon, -1)
        terminated = self.terminated[rows, envs] & stored
        alive = alive_mask(terminated, self.truncated[rows, envs], dim=0).bool() & stored
        obs = {k: torch.cat([v[rows[:1], envs[:1]], self.next_obs[k][rows, envs]]) for k, v in self.obs.items()}
        return WindowBatch(obs=obs, actions=self.action[rows, envs], rewards=self.reward[rows, envs],
                           terminated=terminated, alive=alive)

    def next_obs_at(self, rows: torch.Tensor, env: torch.Tensor) -> Obs:
        """The stored true next observations of steps at ring ``rows`` ``[B, h]`` of envs ``env`` ``[B]`` (a
        :class:`ChunkBatch`'s ``rows`` / ``env``): groups ``[B, h, dim]``."""
        return {k: v[rows, env[:, None]] for k, v in self.next_obs.items()}
