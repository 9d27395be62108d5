"""A tiny point-mass reach task implementing ``sim.VecEnv``, for fast agent and runner tests.

A point at ``pos`` (2-D) moves by ``0.2 * action`` per step towards a random ``target`` in
``[-1, 1]^2``. Leaving ``[-1.5, 1.5]^2`` terminates; 20 steps truncate. Success: within 0.1 of the
target. Policy obs: ``target - pos`` (what a robot could measure); critic obs adds the absolute
position, the target and the time fraction (privileged). Reward groups: ``distance`` and ``bonus``.
"""

from __future__ import annotations

import torch

from sim.vecenv import Obs, Step, VecEnv


class ToyReach(VecEnv):
    """``N`` point masses; all tensors ``[N, ...]`` on ``device``."""

    def __init__(self, num_envs: int = 16, device: str = "cpu", seed: int = 0, max_episode_steps: int = 20):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dt = 0.05
        self.max_episode_steps = max_episode_steps
        self.action_dim = 2
        self.action_low = -torch.ones(2, device=self.device)
        self.action_high = torch.ones(2, device=self.device)
        self.observation_dims = {"policy": 2, "critic": 5}
        self.reward_groups = ("distance", "bonus")
        self.observation_layout = {"policy": [("target_pos", 2, 1.0)]}
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.pos = torch.zeros(num_envs, 2, device=self.device)
        self.target = torch.zeros(num_envs, 2, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _reset_rows(self, rows: torch.Tensor) -> None:
        n = int(rows.sum())
        self.pos[rows] = 0.0
        self.target[rows] = torch.rand(n, 2, generator=self.gen, device=self.device) * 2 - 1
        self.t[rows] = 0

    def _obs(self) -> Obs:
        frac = (self.t.float() / self.max_episode_steps).unsqueeze(-1)
        return {
            "policy": self.target - self.pos,
            "critic": torch.cat([self.pos, self.target, frac], dim=-1),
        }

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self.gen.manual_seed(seed)
        self._reset_rows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._obs()

    def step(self, action: torch.Tensor) -> Step:
        if action.shape != (self.num_envs, 2):
            raise ValueError(f"ToyReach.step expects [{self.num_envs}, 2] actions, got {list(action.shape)}")
        self.pos += 0.2 * action.clamp(-1, 1)
        self.t += 1
        dist = (self.target - self.pos).norm(dim=-1)
        success = dist < 0.1
        terminated = (self.pos.abs() > 1.5).any(-1)
        truncated = (self.t >= self.max_episode_steps) & ~terminated
        terms = {"distance": -dist, "bonus": success.float()}
        by_group = torch.stack([terms["distance"], terms["bonus"]], dim=-1)
        final_obs = self._obs()
        done = terminated | truncated
        log = {"episode/final_distance": float(dist[done].mean())} if bool(done.any()) else {}
        if bool(done.any()):
            self._reset_rows(done)
        info = {
            "final_obs": final_obs,
            "reward_terms": terms,
            "reward_by_group": by_group,
            "success": success,
            "log": log,
        }
        return Step(self._obs(), by_group.sum(-1), terminated, truncated, info)
