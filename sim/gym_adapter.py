"""Any gymnasium environment as a :class:`sim.vecenv.VecEnv`: ``sim.make_env("gym:Pendulum-v1", 4)``.

:class:`GymVecEnvAdapter` holds ``num_envs`` single gymnasium envs in this process and steps them
one after another (it is for reaching gymnasium's catalogue, not for speed: the batched tasks in
:mod:`sim.tasks` are). It follows the VecEnv contract: observations flattened into the
``"policy"`` group, done envs reset inside ``step`` with their last observation in
``info["final_obs"]``, gymnasium's ``truncated`` (the ``TimeLimit`` wrapper) kept apart from
``terminated`` (an env reporting both is terminated), one reward term ``"reward"`` in the one
reward group ``"task"``, ``success`` from ``info["is_success"]`` where the env reports it.

Box actions are ``[N, prod(shape)]`` and clipped to the box; a Discrete(n) action is ``[N, 1]``,
rounded to the nearest integer in ``[0, n - 1]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from sim.vecenv import Obs, Step, VecEnv

EnvFn = Callable[[], gym.Env]


def _episode_limit(env: gym.Env) -> int | None:
    """The env's time limit: ``spec.max_episode_steps`` or a ``TimeLimit`` wrapper's, else ``None``."""
    if env.spec is not None and env.spec.max_episode_steps is not None:
        return int(env.spec.max_episode_steps)
    wrapper = env
    while isinstance(wrapper, gym.Wrapper):
        if isinstance(wrapper, gym.wrappers.TimeLimit):
            return int(wrapper._max_episode_steps)
        wrapper = wrapper.env
    return None


def _control_period(env: gym.Env) -> float | None:
    """Seconds per step: the env's ``dt`` (MuJoCo and classic-control envs) or ``1 / render_fps``."""
    dt = getattr(env.unwrapped, "dt", None)
    if dt is not None:
        return float(dt)
    fps = env.metadata.get("render_fps")
    return 1.0 / float(fps) if fps else None


class GymVecEnvAdapter(VecEnv):
    """``num_envs`` gymnasium envs behind the VecEnv contract.

    Args:
        env_fns: a gymnasium id (made ``num_envs`` times with ``gym.make(id, **make_kwargs)``) or a
            list of thunks, one per env, each returning a ``gymnasium.Env``.
        num_envs: number of envs; with thunks, ``None`` or ``len(env_fns)``.
        device: torch device of the returned tensors.
        seed: env ``i`` is first reset with ``seed + i``.
        max_episode_steps: time limit for envs that have none (a ``TimeLimit`` wrapper is added);
            envs made from an id take it through ``gym.make``.
        dt: control period in seconds, for envs that give neither ``dt`` nor ``render_fps``.
        make_kwargs: keyword arguments of ``gym.make`` (only with an id).
    """

    reward_groups = ("task",)

    def __init__(self, env_fns: str | Sequence[EnvFn], num_envs: int | None = None,
                 device: str | torch.device = "cpu", seed: int = 0, max_episode_steps: int | None = None,
                 dt: float | None = None, **make_kwargs: Any) -> None:
        if isinstance(env_fns, str):
            gym_id, count = env_fns, 1 if num_envs is None else num_envs
            if max_episode_steps is not None:
                make_kwargs["max_episode_steps"] = max_episode_steps
            env_fns = [lambda: gym.make(gym_id, **make_kwargs)] * count
        elif make_kwargs:
            raise ValueError(f"gym.make arguments {sorted(make_kwargs)} need a gymnasium id, not env thunks; "
                             "pass them inside your thunks")
        if num_envs is not None and num_envs != len(env_fns):
            raise ValueError(f"num_envs={num_envs} but {len(env_fns)} env thunks were given; pass one thunk per env")
        if not env_fns:
            raise ValueError("GymVecEnvAdapter needs at least one env (num_envs >= 1)")
        self.envs = [self._with_limit(fn(), max_episode_steps) for fn in env_fns]
        first = self.envs[0]
        for i, env in enumerate(self.envs[1:], start=1):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ValueError(f"env {i} has spaces {env.observation_space}, {env.action_space}; env 0 has "
                                 f"{first.observation_space}, {first.action_space}: all envs must match")
        self.num_envs = len(self.envs)
        self.has_success = False
        """Set once an env's step ``info`` carries ``is_success`` (what Gymnasium-Robotics' goal envs report)."""
        self.device = torch.device(device)
        self.observation_space = first.observation_space
        self.observation_dims = {"policy": int(spaces.flatdim(self.observation_space))}
        self.action_space = first.action_space
        self._set_action_bounds(self.action_space)
        self.max_episode_steps = self._check_limit()
        period = _control_period(first) if dt is None else dt
        if period is None:
            raise ValueError(f"{first} gives neither dt nor metadata['render_fps']; pass dt=<seconds per step>")
        self.dt = period
        self._episode_return = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self._obs = np.zeros((self.num_envs, self.observation_dims["policy"]), dtype=np.float32)
        self.reset(seed=seed)

    # ----------------------------------------------------------------------------- setup
    @staticmethod
    def _with_limit(env: gym.Env, max_episode_steps: int | None) -> gym.Env:
        if max_episode_steps is not None and _episode_limit(env) is None:
            return gym.wrappers.TimeLimit(env, max_episode_steps)
        return env

    def _check_limit(self) -> int:
        limit = _episode_limit(self.envs[0])
        if limit is None:
            raise ValueError(f"{self.envs[0]} has no time limit; pass max_episode_steps=<steps> "
                             "(the VecEnv contract needs one, and truncation comes from it)")
        return limit

    def _set_action_bounds(self, space: spaces.Space) -> None:
        if isinstance(space, spaces.Box):
            self.action_dim = int(np.prod(space.shape))
            low, high = space.low.reshape(-1), space.high.reshape(-1)
        elif isinstance(space, spaces.Discrete):
            self.action_dim = 1
            low = np.array([space.start], dtype=np.float32)
            high = np.array([space.start + space.n - 1], dtype=np.float32)
        else:
            raise ValueError(f"action space {space} is not supported: wrap the env so that its actions are a Box "
                             "or a Discrete space")
        self.action_low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(high, dtype=torch.float32, device=self.device)

    # ----------------------------------------------------------------------------- conversion
    def _flat(self, observation: Any) -> np.ndarray:
        return np.asarray(spaces.flatten(self.observation_space, observation), dtype=np.float32).reshape(-1)

    def _env_action(self, action: np.ndarray) -> Any:
        """One env's action from its row ``[action_dim]`` of the batched action."""
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return int(np.clip(np.rint(action[0]), space.start, space.start + space.n - 1))
        return np.clip(action, space.low.reshape(-1), space.high.reshape(-1)).reshape(space.shape).astype(space.dtype)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(array, dtype=dtype).to(self.device)

    # ----------------------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; env ``i`` with ``seed + i`` when a seed is given (see :class:`VecEnv`)."""
        for i, env in enumerate(self.envs):
            observation, _ = env.reset(seed=None if seed is None else seed + i)
            self._obs[i] = self._flat(observation)
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        return {"policy": self._tensor(self._obs.copy())}

    def step(self, action: torch.Tensor) -> Step:
        """Step every env once, resetting those that end (see :class:`sim.vecenv.VecEnv`)."""
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"action has shape {tuple(action.shape)}, expected ({self.num_envs}, {self.action_dim})")
        actions = action.detach().to("cpu", torch.float64).numpy()
        n = self.num_envs
        reward, terminated, truncated = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        success = np.zeros(n, dtype=bool)
        final = np.empty_like(self._obs)
        ended_returns, ended_lengths = [], []
        for i, env in enumerate(self.envs):
            observation, r, term, trunc, info = env.step(self._env_action(actions[i]))
            reward[i], terminated[i], truncated[i] = r, term, trunc and not term
            if "is_success" in info:
                success[i] = bool(info["is_success"])
                self.has_success = True
            final[i] = self._flat(observation)
            self._episode_return[i] += r
            self._episode_length[i] += 1
            if term or trunc:
                ended_returns.append(self._episode_return[i])
                ended_lengths.append(self._episode_length[i])
                self._episode_return[i], self._episode_length[i] = 0.0, 0
                observation, _ = env.reset()
            self._obs[i] = self._flat(observation)
        log = {}
        if ended_returns:
            log = {"episode/return": float(np.mean(ended_returns)), "episode/length": float(np.mean(ended_lengths))}
        reward_t = self._tensor(reward)
        info = {"final_obs": {"policy": self._tensor(final)}, "reward_terms": {"reward": reward_t},
                "reward_by_group": reward_t[:, None].clone(), "success": self._tensor(success, torch.bool), "log": log}
        return Step({"policy": self._tensor(self._obs.copy())}, reward_t, self._tensor(terminated, torch.bool),
                    self._tensor(truncated, torch.bool), info)

    def render(self, env_index: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB frame ``[H, W, 3]`` of env ``env_index`` at the env's own size (``width``/``height`` are
        set when the env is made, e.g. ``make_env("gym:Hopper-v5", render_mode="rgb_array", width=...)``)."""
        env = self.envs[env_index]
        if env.render_mode != "rgb_array":
            raise ValueError(f"env {env_index} was made with render_mode={env.render_mode!r}; "
                             "make it with render_mode='rgb_array' to render frames")
        return np.asarray(env.render())

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


def make_gym_env(gym_id: str, num_envs: int = 1, device: str = "cpu", seed: int = 0, nthread: int = 0,
                 **make_kwargs: Any) -> GymVecEnvAdapter:
    """``sim.make_env("gym:<id>", ...)``: ``num_envs`` copies of ``gym.make(gym_id, **make_kwargs)``.

    ``nthread`` is taken as by every task factory, but the adapter steps its envs one after another
    in the calling thread, so only 0 (all, here: one) or 1 is meaningful.
    """
    if nthread not in (0, 1):
        raise ValueError(f"nthread={nthread}: the gymnasium adapter steps its envs in the calling thread; "
                         "use nthread=0 or 1 (or a batched task, see sim.list_tasks())")
    return GymVecEnvAdapter(gym_id, num_envs=num_envs, device=device, seed=seed, **make_kwargs)
