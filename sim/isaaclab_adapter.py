"""An Isaac Lab env as a :class:`sim.vecenv.VecEnv`: ``sim.make_env("Isaac-Cartpole", 64, backend="isaaclab")``.

:class:`IsaacLabVecEnvAdapter` wraps a ``ManagerBasedRLEnv`` or ``DirectRLEnv`` (Isaac Lab 3.0). Isaac
Lab's ``step(action) -> (obs, reward, terminated, time_outs, extras)`` already resets done envs and
returns post-reset observations, so the adapter only renames:

- observation groups: ``policy`` as is, ``critic`` where the task has one (else agents read
  ``policy``, see ``EnvSpec.critic_group``); each group flattened to ``[N, D]``, other groups dropped;
- ``time_outs`` -> ``truncated`` (an env reporting both is terminated);
- ``extras["final_obs"]`` (needs ``cfg.compute_final_obs = True``, which :func:`make_isaaclab_env`
  sets; Isaac Lab fills it only on steps where some env resets) -> ``info["final_obs"]``;
- per-term rewards of a manager-based env: the reward manager's weighted step rewards times
  ``step_dt`` (they sum to Isaac Lab's reward) -> ``info["reward_terms"]``; a direct env has one
  term, ``reward``. One reward group, ``task``;
- ``success``: the termination term named ``success``, where the task has one (Isaac Lab's
  convention, e.g. the reach tasks);
- ``log``: our episode statistics (``episode/return``, ``episode/length``, ``episode/success``,
  ``episode_reward/<term>``: per-episode sums) of the envs that ended in this step, plus Isaac
  Lab's own ``extras["log"]`` entries as ``isaaclab/<key>``.

Isaac Lab runs one simulation per process: :func:`make_isaaclab_env` closes the env it made before
(if still open) when it makes the next, e.g. the training env when the final evaluation starts.
Only :func:`make_isaaclab_env` imports ``isaaclab``; the adapter reads the env through the
attributes named above, so it also wraps a stand-in with Isaac Lab's signature (``tests/``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sim.errors import SimInputError, UnknownTaskError
from sim.vecenv import Obs, Step, VecEnv

GROUPS = ("policy", "critic")
"""Isaac Lab observation groups the adapter passes on (the rest, e.g. image groups, are dropped)."""
DEFAULT_PRESETS = ("newton_mjwarp",)
"""Isaac Lab config presets chosen by default: Newton's MuJoCo Warp solver, which runs on CPU and GPU
without Isaac Sim (a task without that preset keeps its own default)."""


class IsaacLabVecEnvAdapter(VecEnv):
    """An Isaac Lab RL env behind the VecEnv contract (see the module docstring).

    Args:
        env: the unwrapped Isaac Lab env (``gym.make(...).unwrapped``), made with
            ``cfg.compute_final_obs = True``.
        reward_manager: the env's ``RewardManager`` (manager-based envs), for per-term rewards; ``None``
            for a direct env (one term, ``reward``).
        termination_manager: the env's ``TerminationManager``; its ``success`` term, if any, is ``success``.
        clip_actions: bound actions to ``[-clip_actions, clip_actions]`` (``action_low/high``); ``None``
            keeps Isaac Lab's action space (unbounded for manager-based envs; PPO needs no bounds, the
            off-policy agents do).
    """

    reward_groups = ("task",)

    def __init__(self, env: Any, reward_manager: Any = None, termination_manager: Any = None,
                 clip_actions: float | None = None) -> None:
        if not env.cfg.compute_final_obs:
            raise ValueError("the Isaac Lab env was made with cfg.compute_final_obs=False; set it True before "
                             "making the env (the VecEnv contract hands critics the pre-reset observation)")
        self.env = env
        self.reward_manager = reward_manager
        self.termination_manager = termination_manager
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        self.dt = float(env.step_dt)
        self.max_episode_steps = int(env.max_episode_length)
        self.observation_dims = self._group_dims(env.single_observation_space)
        space = env.single_action_space
        self.action_dim = int(np.prod(space.shape))
        low, high = space.low.reshape(-1), space.high.reshape(-1)
        if clip_actions is not None:
            if not clip_actions > 0:
                raise SimInputError(f"clip_actions={clip_actions} must be > 0 (or null for Isaac Lab's action space)")
            low, high = np.full(self.action_dim, -clip_actions), np.full(self.action_dim, clip_actions)
        self.action_low = torch.as_tensor(low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(high, dtype=torch.float32, device=self.device)
        self.reward_terms = list(reward_manager.active_terms) if reward_manager is not None else ["reward"]
        self.has_success = termination_manager is not None and "success" in termination_manager.active_terms
        self.closed = False
        self._episode_return = torch.zeros(self.num_envs, device=self.device)
        self._episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._episode_terms = torch.zeros(self.num_envs, len(self.reward_terms), device=self.device)

    @staticmethod
    def _group_dims(space: Any) -> dict[str, int]:
        """``{group: flat size}`` of the passed-on groups of Isaac Lab's ``single_observation_space`` (a Dict)."""
        if "policy" not in space.spaces:
            raise SimInputError(f"the Isaac Lab env has observation groups {sorted(space.spaces)} but no 'policy' "
                                "group, which the policy reads; add one to the task's ObservationsCfg")
        dims = {}
        for group in GROUPS:
            if group not in space.spaces:
                continue
            shape = space.spaces[group].shape
            if shape is None:
                raise SimInputError(f"observation group {group!r} is a dict of terms; set concatenate_terms=True in "
                                    "the task's ObservationsCfg group so that it is one tensor")
            dims[group] = int(np.prod(shape))
        return dims

    def _groups(self, obs: Mapping[str, torch.Tensor]) -> Obs:
        """Isaac Lab's observation dict -> our groups, each ``[N, D]`` float32, copied (Isaac Lab 3.0 computes
        into buffers it reuses next step, and agents keep what ``step`` returns)."""
        return {g: obs[g].reshape(self.num_envs, -1).to(torch.float32, copy=True) for g in self.observation_dims}

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this Isaac Lab env is closed: Isaac Lab runs one simulation per process, and a "
                               "later make_isaaclab_env (or close) ended it; make a new env")

    # ----------------------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env (Isaac Lab seeds torch, numpy and warp with ``seed``); see :class:`VecEnv`."""
        self._check_open()
        obs, _ = self.env.reset(seed=seed)
        self._episode_return.zero_()
        self._episode_length.zero_()
        self._episode_terms.zero_()
        return self._groups(obs)

    def step(self, action: torch.Tensor) -> Step:
        """Step every env once; Isaac Lab resets those that end (see :class:`sim.vecenv.VecEnv`)."""
        self._check_open()
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"action has shape {tuple(action.shape)}, expected ({self.num_envs}, {self.action_dim})")
        action = torch.minimum(torch.maximum(action.to(self.device), self.action_low), self.action_high)
        obs, reward, terminated, time_outs, extras = self.env.step(action)
        reward = reward.to(torch.float32, copy=True)  # copies: Isaac Lab reuses these buffers next step
        terminated = terminated.to(torch.bool, copy=True)
        truncated = time_outs.bool() & ~terminated
        done = terminated | truncated
        any_done = bool(done.any())
        # extras persist between steps: final_obs and log are fresh only on a step where an env reset
        final_obs = self._groups(extras["final_obs"]) if any_done else self._groups(obs)
        terms = self._reward_terms(reward)
        success = (self.termination_manager.get_term("success").bool() if self.has_success
                   else torch.zeros_like(done))
        self._episode_return += reward
        self._episode_length += 1
        self._episode_terms += terms
        log = self._episode_log(done, success, extras.get("log", {})) if any_done else {}
        info = {"final_obs": final_obs,
                "reward_terms": {name: terms[:, i] for i, name in enumerate(self.reward_terms)},
                "reward_by_group": reward[:, None].clone(), "log": log}
        if self.has_success:
            info["success"] = success
        return Step(self._groups(obs), reward, terminated, truncated, info)

    def _reward_terms(self, reward: torch.Tensor) -> torch.Tensor:
        """``[N, T]`` reward of each term in this step (weighted, times ``step_dt``); sums to ``reward``."""
        if self.reward_manager is None:
            return reward[:, None]
        # Isaac Lab 3.0 has no public batched accessor (get_active_iterable_terms reads one env)
        return self.reward_manager._step_reward.float() * self.dt

    def _episode_log(self, done: torch.Tensor, success: torch.Tensor, isaac_log: Mapping[str, Any]) -> dict:
        """Means over the episodes that ended in this step; resets their running sums."""
        log = {"episode/return": float(self._episode_return[done].mean()),
               "episode/length": float(self._episode_length[done].float().mean())}
        if self.has_success:
            log["episode/success"] = float(success[done].float().mean())
        for i, name in enumerate(self.reward_terms):
            log[f"episode_reward/{name}"] = float(self._episode_terms[done, i].mean())
        log.update({f"isaaclab/{k}": float(v) for k, v in isaac_log.items()})
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0
        self._episode_terms[done] = 0.0
        return log

    def close(self) -> None:
        """Close the Isaac Lab env (which ends this process's simulation context)."""
        if not self.closed:
            self.env.close()
            self.closed = True


_live: list[IsaacLabVecEnvAdapter] = []
"""The env :func:`make_isaaclab_env` made last (Isaac Lab allows one per process)."""


def _task_ids() -> list[str]:
    """Ids of the registered Isaac Lab RL envs (``isaaclab_tasks`` imported)."""
    import gymnasium as gym

    return sorted(k for k, s in gym.registry.items()
                  if isinstance(s.entry_point, str) and s.entry_point.startswith("isaaclab"))


def check_task(task: str) -> None:
    """Refuse an id Isaac Lab does not register, naming the close ones.

    Raises:
        SimInputError: ``isaaclab`` is not importable here.
        UnknownTaskError: no Isaac Lab task has this id.
    """
    try:
        import isaaclab_tasks  # noqa: F401  (registers the tasks with gymnasium)
    except ImportError as exc:
        raise SimInputError(f"sim backend 'isaaclab' needs Isaac Lab, which is not importable here ({exc}); fix: "
                            "run in the Isaac Lab venv made by `bash .ci/setup_isaaclab` (docs/isaaclab.md)") from None
    ids = _task_ids()
    if task in ids:
        return
    stem = task.removesuffix("-v0").lower()
    close = [i for i in ids if stem in i.lower()] or ids
    raise UnknownTaskError(f"Isaac Lab has no task {task!r} (Isaac Lab 3.0 ids have no -v0 suffix); close ones: "
                           f"{', '.join(close[:20])}")


def _apply(cfg: Any, overrides: Mapping[str, Any], task: str) -> None:
    """Set nested ``overrides`` (``{"scene": {"env_spacing": 2.0}, "episode_length_s": 3}``) on an env cfg."""
    from isaaclab.utils.dict import update_class_from_dict

    try:
        update_class_from_dict(cfg, dict(overrides))
    except (KeyError, ValueError, TypeError) as exc:
        raise SimInputError(f"Isaac Lab task {task!r} refused the override {dict(overrides)}: {exc}; fix: use keys "
                            f"of its env cfg ({type(cfg).__name__})") from None


def make_isaaclab_env(task: str, num_envs: int = 1, device: str = "cpu", seed: int = 0,
                      presets: Sequence[str] = DEFAULT_PRESETS, clip_actions: float | None = None,
                      **overrides: Any) -> IsaacLabVecEnvAdapter:
    """``sim.make_env(task, ..., backend="isaaclab")``: the Isaac Lab task ``task`` as a VecEnv.

    Loads the task's env cfg from Isaac Lab's registry, resolves its config presets (``presets``
    first, else each preset's default), sets ``num_envs``, ``device`` (``cuda`` means ``cuda:0``),
    ``seed`` and ``compute_final_obs``, applies ``overrides`` (nested keys of the env cfg), then
    closes the env made before (see the module docstring) and makes this one.
    """
    import gymnasium as gym

    check_task(task)
    from isaaclab.envs import ManagerBasedRLEnv
    from isaaclab_tasks.utils.hydra import resolve_presets
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    cfg = resolve_presets(load_cfg_from_registry(task, "env_cfg_entry_point"), selected=tuple(presets))
    cfg.scene.num_envs = num_envs
    cfg.sim.device = "cuda:0" if device == "cuda" else str(device)
    cfg.seed = seed
    cfg.compute_final_obs = True
    _apply(cfg, overrides, task)
    while _live:
        _live.pop().close()
    env = gym.make(task, cfg=cfg).unwrapped
    managers = {}
    if isinstance(env, ManagerBasedRLEnv):
        managers = {"reward_manager": env.reward_manager, "termination_manager": env.termination_manager}
    adapter = IsaacLabVecEnvAdapter(env, clip_actions=clip_actions, **managers)
    _live.append(adapter)
    return adapter
