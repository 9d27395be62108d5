"""What a critic predicted along evaluation episodes, next to the discounted return that was realised.

For every step ``t`` of a deterministic evaluation episode we keep the critic's member estimates
``[E, G]`` of the state (V critics) or of the state and the action actually taken (Q critics), and
the realised discounted return ``sum_k gamma^k r_{t+k}`` per reward group. Their difference is the
critic's bias (positive = overestimation); the spread of the members is the ensemble disagreement.

Episodes cut by the time limit have no realised tail. With ``tail="bootstrap"`` (default) the
realised return of such an episode is completed by ``gamma^(T - t) V(s_T)``, the critic's own value of
the final observation (the comparison then judges the realised part only); with ``tail="exclude"`` a
step counts in the statistics only while the missing tail weighs ``gamma^(T - t) <= tail_weight``.
Terminated episodes are complete and count everywhere.

Shapes: ``T`` steps of one episode, ``E`` critic members, ``G`` value groups, ``N`` envs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from robot_rl.agents.base import Agent
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.models.chunked_actor import ChunkPlayer


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``R_t = r_t + gamma R_{t+1}`` along one episode: ``[T, G] -> [T, G]`` (``R_T = 0``)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1:], dtype=np.float64)
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def counted_steps(length: int, truncated: bool, gamma: float, tail_weight: float) -> np.ndarray:
    """``[T]`` bool: steps whose realised return is complete enough to judge the critic by."""
    if not truncated:
        return np.ones(length, dtype=bool)
    remaining = length - np.arange(length)  # steps from t to the cut
    return gamma**remaining <= tail_weight


@dataclass
class EpisodeTrace:
    """One evaluation episode.

    Attributes:
        values: ``[T, E, G]`` critic member estimates at every step.
        rewards: ``[T, G]`` rewards per value group (the total reward when ``G = 1``).
        returns: ``[T, G]`` realised discounted returns (+ the bootstrapped tail after a time-limit cut).
        counted: ``[T]`` bool, steps used in the statistics (see :func:`counted_steps`).
        success: the task's success flag at the last step (False when the task has none).
        truncated: the episode ended by the time limit.
    """

    values: np.ndarray
    rewards: np.ndarray
    returns: np.ndarray
    counted: np.ndarray
    success: bool
    truncated: bool


class EpisodeQuota:
    """Each env's fixed share of ``episodes`` (split as :func:`robot_rl.train.evaluation.evaluate` splits them) and
    how many of them it has finished."""

    def __init__(self, episodes: int, num_envs: int) -> None:
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        self.episodes = episodes
        self.quota = [episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)]
        self.done = [0] * num_envs

    def max_steps(self, episode_steps: int) -> int:
        """Env steps after which every quota must be full."""
        return (max(self.quota) + 1) * episode_steps + 1

    def full(self) -> bool:
        return all(d >= q for d, q in zip(self.done, self.quota, strict=True))

    def take(self, i: int) -> bool:
        """Env ``i`` finished an episode: whether it counts (its quota was not yet full)."""
        if self.done[i] >= self.quota[i]:
            return False
        self.done[i] += 1
        return True

    def check(self, collected: int) -> None:
        if collected != self.episodes:
            raise RuntimeError(f"collected {collected}/{self.episodes} episodes; is the env's time limit set?")


EXECUTIONS = ("replan", "open_loop")
TAILS = ("bootstrap", "exclude")


@torch.no_grad()
def collect_traces(
    agent: Agent, env: Any, episodes: int, gamma: float, seed: int = 0, tail: str = "bootstrap",
    tail_weight: float = 0.05, execution: str = "replan",
) -> list[EpisodeTrace]:
    """Run ``episodes`` deterministic episodes of ``agent`` on ``env`` (a ``sim.VecEnv``), recording values.

    Every env contributes a fixed quota of episodes (as :func:`robot_rl.train.evaluation.evaluate`);
    ``tail`` handles time-limit cuts (see the module docstring). ``execution="open_loop"`` (chunked
    agents) plays every chunk of the agent's deployable policy (``agent.policy()``, ``agent.policy_chunking()``)
    to its end instead of re-planning at every step. The values are ``agent.critic_values``.
    """
    if execution not in EXECUTIONS:
        raise ValueError(f"execution must be one of {EXECUTIONS}, got {execution!r}")
    player = None
    if execution == "open_loop":
        H = agent.policy_chunking()[0]  # DQC executes its l-action chunks
        if H == 1:
            raise ValueError("open-loop execution needs a chunked agent (critic.chunk_len > 1)")
        player = ChunkPlayer(agent.policy(), H, env.action_dim, ChunkExecution("open_loop", H, 0.0))
    quota = EpisodeQuota(episodes, env.num_envs)
    if tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}, got {tail!r}")
    N = env.num_envs
    open_steps: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(N)]
    traces: list[EpisodeTrace] = []
    obs = env.reset(seed=seed)
    agent.train_mode(False)
    for _ in range(quota.max_steps(env.max_episode_steps)):
        if quota.full():
            break
        action = agent.act(obs, deterministic=True) if player is None else player(obs["policy"])
        action = action.clamp(env.action_low, env.action_high)
        values = agent.critic_values(obs, action).permute(1, 0, 2).cpu().numpy()  # [N, E, G]
        step = env.step(action)
        G = values.shape[-1]
        if G > 1:
            rewards = step.info["reward_by_group"].cpu().numpy()
        else:
            rewards = step.reward.cpu().numpy()[:, None]
        done = (step.terminated | step.truncated).cpu().numpy()
        success = step.info.get("success", torch.zeros_like(step.terminated)).cpu().numpy()
        truncated = (step.truncated & ~step.terminated).cpu().numpy()
        tail_values = np.zeros((N, G))
        if tail == "bootstrap" and truncated.any():
            final = step.info["final_obs"]
            final_action = agent.act(final, deterministic=True).clamp(env.action_low, env.action_high)
            tail_values = agent.critic_values(final, final_action).mean(0).cpu().numpy()
        if player is not None:
            player.reset(step.terminated | step.truncated)
        for i in range(N):
            open_steps[i].append((values[i], rewards[i]))
            if not done[i]:
                continue
            if quota.take(i):
                v = np.stack([s[0] for s in open_steps[i]])
                r = np.stack([s[1] for s in open_steps[i]])
                returns = discounted_returns(r, gamma)
                cut = bool(truncated[i])
                if cut and tail == "bootstrap":
                    returns += gamma ** (len(r) - np.arange(len(r)))[:, None] * tail_values[i][None, :]
                traces.append(EpisodeTrace(
                    values=v, rewards=r, returns=returns,
                    counted=counted_steps(len(r), cut and tail == "exclude", gamma, tail_weight),
                    success=bool(success[i]), truncated=bool(truncated[i]),
                ))
            open_steps[i] = []
        obs = step.obs
    quota.check(len(traces))
    return traces


@torch.no_grad()
def collect_chunk_traces(agent: Agent, env: Any, episodes: int, gamma: float, seed: int = 0) -> list[EpisodeTrace]:
    """:func:`collect_traces` for an agent whose critic scores chunks where they start, up to the time limit
    (:attr:`Agent.critic_at_chunk_starts <robot_rl.agents.Agent.critic_at_chunk_starts>`, ``agent=vla_rl``).

    The agent plays its deterministic policy through :meth:`~robot_rl.agents.Agent.act` and
    :meth:`~robot_rl.agents.Agent.observe` (which keep its chunks; ``env`` must be the env the agent renders
    from). A trace holds the chunk starts only: ``values [C, E, 1]`` there, ``rewards [C, 1]`` each chunk's
    discounted reward, ``returns [C, 1]`` the realised discounted return from the chunk's first step to the
    episode's end. The critic's value ends at the time limit too, so every return is complete: no tail.
    """
    quota = EpisodeQuota(episodes, env.num_envs)
    steps: list[list[tuple[np.ndarray, float]]] = [[] for _ in range(env.num_envs)]  # per env: (values [E], reward)
    traces: list[EpisodeTrace] = []
    obs = env.reset(seed=seed)
    agent.train_mode(False)
    agent.start_episodes()
    for _ in range(quota.max_steps(env.max_episode_steps)):
        if quota.full():
            break
        action = agent.act(obs, deterministic=True)
        values = agent.critic_values(obs, action)[:, :, 0].T.cpu().numpy()  # [N, E], NaN inside a chunk
        step = env.step(action.clamp(env.action_low, env.action_high))
        agent.observe(obs, action, step)
        rewards = step.reward.cpu().numpy()
        done = (step.terminated | step.truncated).cpu().numpy()
        success = step.info.get("success", torch.zeros_like(step.terminated)).cpu().numpy()
        for i in range(env.num_envs):
            steps[i].append((values[i], float(rewards[i])))
            if not done[i]:
                continue
            if quota.take(i):
                traces.append(chunk_start_trace(steps[i], gamma, bool(success[i]), bool(step.truncated[i])))
            steps[i] = []
        obs = step.obs
    quota.check(len(traces))
    return traces


def chunk_start_trace(steps: list[tuple[np.ndarray, float]], gamma: float, success: bool,
                      truncated: bool) -> EpisodeTrace:
    """One episode's steps ``(values [E] or NaN, reward)`` -> its trace at the chunk starts."""
    values = np.stack([v for v, _ in steps])  # [T, E]
    rewards = np.array([r for _, r in steps])[:, None]  # [T, 1]
    returns = discounted_returns(rewards, gamma)
    starts = np.flatnonzero(np.isfinite(values).all(1))
    ends = np.append(starts[1:], len(steps))
    chunk_rewards = np.array([[returns[a, 0] - gamma ** (b - a) * (returns[b, 0] if b < len(steps) else 0.0)]
                              for a, b in zip(starts, ends, strict=True)])
    return EpisodeTrace(values=values[starts][:, :, None], rewards=chunk_rewards, returns=returns[starts],
                        counted=np.ones(len(starts), dtype=bool), success=success, truncated=truncated)


@dataclass
class ValueStats:
    """Critic accuracy over the counted steps of some episodes (all per value group ``[G]``).

    Attributes:
        bias: mean of (member-mean prediction - realised return); > 0 is overestimation.
        abs_error: mean absolute error of the member-mean prediction.
        correlation: Pearson correlation of prediction and realised return (nan if constant).
        disagreement: mean standard deviation over members (0 for a single network).
        steps: counted steps.
    """

    bias: list[float]
    abs_error: list[float]
    correlation: list[float]
    disagreement: list[float]
    steps: int
    extra: dict[str, float] = field(default_factory=dict)


def value_stats(traces: list[EpisodeTrace]) -> ValueStats:
    """Summarise :class:`EpisodeTrace` s into :class:`ValueStats`."""
    values = np.concatenate([t.values[t.counted] for t in traces])  # [S, E, G]
    returns = np.concatenate([t.returns[t.counted] for t in traces])  # [S, G]
    if len(values) == 0:
        raise ValueError(
            "no counted steps: every episode was cut by the time limit within the discount horizon "
            "(gamma^(T - t) > tail_weight at every step); evaluate longer episodes or use a smaller gamma"
        )
    pred = values.mean(1)
    err = pred - returns
    corr = []
    for g in range(pred.shape[1]):
        p, r = pred[:, g], returns[:, g]
        corr.append(float(np.corrcoef(p, r)[0, 1]) if p.std() > 0 and r.std() > 0 else float("nan"))
    return ValueStats(
        bias=err.mean(0).tolist(),
        abs_error=np.abs(err).mean(0).tolist(),
        correlation=corr,
        disagreement=values.std(1).mean(0).tolist(),
        steps=len(values),
        extra={"success_rate": float(np.mean([t.success for t in traces]))},
    )
