"""A batched torch Pendulum (gymnasium's Pendulum-v1 dynamics) implementing ``sim.VecEnv``.

Swing a pendulum up and hold it: ``theta`` from upright, torque ``2 * action`` with action in
``[-1, 1]``; reward ``-(theta^2 + 0.1 * theta_dot^2 + 0.001 * torque^2)``; episodes end only by the
time limit (truncation, never termination). Policy obs: ``[cos theta, sin theta, theta_dot]``.
A random policy scores about -1200 per 200-step episode; a good one about -150.
"""

from __future__ import annotations

import math

import torch
from agent_loop import drive

from robot_rl.agents.base import Agent
from sim.vecenv import Obs, Step, VecEnv


class PendulumVecEnv(VecEnv):
    """``N`` pendulums stepped together; tensors ``[N, ...]``."""

    MAX_SPEED, MAX_TORQUE, DT, G, M, L = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0, max_episode_steps: int = 200):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dt = self.DT
        self.max_episode_steps = max_episode_steps
        self.action_dim = 1
        self.action_low = -torch.ones(1, device=self.device)
        self.action_high = torch.ones(1, device=self.device)
        self.observation_dims = {"policy": 3}
        self.reward_groups = ("total",)
        self.observation_layout = {"policy": [("pendulum_state", 3, 1.0)]}
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.theta = torch.zeros(num_envs, device=self.device)
        self.theta_dot = torch.zeros(num_envs, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.episode_return = torch.zeros(num_envs, device=self.device)

    def _reset_rows(self, rows: torch.Tensor) -> None:
        n = int(rows.sum())
        self.theta[rows] = (torch.rand(n, generator=self.gen, device=self.device) * 2 - 1) * math.pi
        self.theta_dot[rows] = torch.rand(n, generator=self.gen, device=self.device) * 2 - 1
        self.t[rows] = 0
        self.episode_return[rows] = 0.0

    def _obs(self) -> Obs:
        return {"policy": torch.stack([self.theta.cos(), self.theta.sin(), self.theta_dot], dim=-1)}

    def reset(self, seed: int | None = None) -> Obs:
        """Reset all pendulums (angle uniform in [-pi, pi], speed in [-1, 1])."""
        if seed is not None:
            self.gen.manual_seed(seed)
        self._reset_rows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._obs()

    def step(self, action: torch.Tensor) -> Step:
        """One 0.05 s step of every pendulum; ``action`` ``[N, 1]``."""
        if action.shape != (self.num_envs, 1):
            raise ValueError(f"PendulumVecEnv.step expects [{self.num_envs}, 1] actions, got {list(action.shape)}")
        torque = self.MAX_TORQUE * action[:, 0].clamp(-1, 1)
        upright = torch.remainder(self.theta + math.pi, 2 * math.pi) - math.pi
        reward = -(upright.pow(2) + 0.1 * self.theta_dot.pow(2) + 0.001 * torque.pow(2))
        accel = 3 * self.G / (2 * self.L) * self.theta.sin() + 3.0 / (self.M * self.L**2) * torque
        self.theta_dot = (self.theta_dot + accel * self.DT).clamp(-self.MAX_SPEED, self.MAX_SPEED)
        self.theta = self.theta + self.theta_dot * self.DT
        self.t += 1
        self.episode_return += reward
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        truncated = self.t >= self.max_episode_steps
        final_obs = self._obs()
        log = {}
        if bool(truncated.any()):
            log["episode/return"] = float(self.episode_return[truncated].mean())
            self._reset_rows(truncated)
        info = {
            "final_obs": final_obs,
            "reward_terms": {"swing_up": reward},
            "reward_by_group": reward.unsqueeze(-1),
            "success": upright.abs() < 0.1,
            "log": log,
        }
        return Step(self._obs(), reward, terminated, truncated, info)


def train_and_evaluate(agent: Agent, env: PendulumVecEnv, env_steps: int, eval_env: PendulumVecEnv) -> float:
    """Train ``agent`` for ``env_steps`` vector steps, then return its mean deterministic return on
    one episode of each of ``eval_env``'s envs."""
    drive(agent, env, env_steps)
    obs = eval_env.reset(seed=123)
    total = torch.zeros(eval_env.num_envs)
    for _ in range(eval_env.max_episode_steps):
        step = eval_env.step(agent.act(obs, deterministic=True))
        total += step.reward
        obs = step.obs
    return float(total.mean())
