"""A stand-in for an Isaac Lab RL env (Isaac Lab needs Python 3.12 and its own venv; the real thing is
tested in ``tests/isaaclab/``). It reproduces what :class:`sim.isaaclab_adapter.IsaacLabVecEnvAdapter`
reads of a ``ManagerBasedRLEnv`` (Isaac Lab 3.0), with its semantics:

- ``reset(seed) -> (obs, extras)``, ``step(action) -> (obs, reward, terminated, time_outs, extras)``;
  done envs are reset inside ``step`` and ``obs`` is post-reset;
- ``extras`` is one dict kept across steps: ``final_obs`` and ``log`` are written only on a step where
  some env resets (and left stale otherwise), as Isaac Lab does;
- a reward manager whose ``_step_reward`` holds each term's weighted reward per second (times
  ``step_dt`` they sum to the reward), a termination manager with ``active_terms``/``get_term``;
- ``single_observation_space`` (a gymnasium Dict of groups), an unbounded ``single_action_space``;
- the reward and ``terminated`` tensors it returns are buffers it overwrites next step.

The task: a point on a line, ``x' = x + 0.5 * a``, starts at ``x0`` (env ``i``: ``0.5 + 0.1 i``), succeeds
(terminates) when ``|x| < 0.1`` and times out after ``max_episode_length`` steps. Rewards: ``alive``
(weight 1) and ``distance`` (weight -2, ``x^2``), with ``step_dt = 0.1``. Groups: ``policy`` ``[x, t]``,
``critic`` ``[x, t, x0]``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from gymnasium import spaces


class StandInRewardManager:
    def __init__(self, num_envs: int) -> None:
        self.active_terms = ["alive", "distance"]
        self.weights = torch.tensor([1.0, -2.0])
        self._step_reward = torch.zeros(num_envs, 2)

    def compute(self, x: torch.Tensor, dt: float) -> torch.Tensor:
        self._step_reward[:] = torch.stack([torch.ones_like(x), x**2], dim=1) * self.weights
        return self._step_reward.sum(dim=1) * dt


class StandInTerminationManager:
    def __init__(self, num_envs: int) -> None:
        self.active_terms = ["time_out", "success"]
        self._term_dones = torch.zeros(num_envs, 2, dtype=torch.bool)

    def get_term(self, name: str) -> torch.Tensor:
        return self._term_dones[:, self.active_terms.index(name)]


class StandInIsaacEnv:
    """``num_envs`` points; Isaac Lab's step/reset signature (see the module docstring)."""

    step_dt = 0.1

    def __init__(self, num_envs: int = 3, max_episode_length: int = 4, compute_final_obs: bool = True,
                 critic: bool = True) -> None:
        self.num_envs = num_envs
        self.device = "cpu"
        self.max_episode_length = max_episode_length
        self.cfg = SimpleNamespace(compute_final_obs=compute_final_obs)
        groups = {"policy": spaces.Box(-np.inf, np.inf, (2,))}
        if critic:
            groups["critic"] = spaces.Box(-np.inf, np.inf, (3,))
        self.single_observation_space = spaces.Dict(groups)
        self.single_action_space = spaces.Box(-np.inf, np.inf, (1,))
        self.reward_manager = StandInRewardManager(num_envs)
        self.reward_buf = torch.zeros(num_envs)
        self.terminated_buf = torch.zeros(num_envs, dtype=torch.bool)
        self.termination_manager = StandInTerminationManager(num_envs)
        self.x0 = 0.5 + 0.1 * torch.arange(num_envs, dtype=torch.float32)
        self.x = self.x0.clone()
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.extras: dict = {}
        self.seeds: list[int | None] = []
        self.closed = False

    def _obs(self) -> dict[str, torch.Tensor]:
        obs = {"policy": torch.stack([self.x, self.t.float()], dim=1)}
        if "critic" in self.single_observation_space.spaces:
            obs["critic"] = torch.stack([self.x, self.t.float(), self.x0], dim=1)
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.seeds.append(seed)
        self.x = self.x0.clone()
        self.t.zero_()
        return self._obs(), self.extras

    def step(self, action: torch.Tensor):
        self.x = self.x + 0.5 * action[:, 0]
        self.t += 1
        time_out = self.t >= self.max_episode_length
        success = self.x.abs() < 0.1
        self.termination_manager._term_dones[:] = torch.stack([time_out, success], dim=1)
        reward = self.reward_manager.compute(self.x, self.step_dt)
        done = time_out | success
        if done.any():
            if self.cfg.compute_final_obs:
                self.extras["final_obs"] = self._obs()
            self.extras["log"] = {"Episode_Termination/success": success[done].float().mean()}
            self.x[done] = self.x0[done]
            self.t[done] = 0
        self.reward_buf[:] = reward
        self.terminated_buf[:] = success
        return self._obs(), self.reward_buf, self.terminated_buf, time_out, self.extras

    def close(self) -> None:
        self.closed = True
