"""Deterministic policy evaluation with confidence intervals, and optional mp4 video."""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.agents.base import Agent
from robot_rl.errors import InputError
from robot_rl.models.chunked_actor import ChunkPlayer
from sim.env import TaskEnv
from sim.tasks.terms import action_excess

Z95 = 1.959963984540054
EXCESS_TOLERANCE = 1e-6
"""Rad of :func:`sim.tasks.terms.action_excess` below which a command counts as passed unchanged (float32 noise)."""


def has_joint_targets(env: Any) -> bool:
    """Whether ``env`` is a batched sim env whose actions are joint targets (what the deploy safety layer checks)."""
    return isinstance(env, TaskEnv) and env.robot.control.action_type != "joint_torque"


def mean_ci(values: list[float], z: float = Z95) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation confidence interval (``z * s / sqrt(n)``)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci of no values")
    mean = float(np.mean(values))
    half = z * float(np.std(values, ddof=1)) / math.sqrt(n) if n > 1 else float("inf")
    return mean, half


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` of a success rate (sound at 0% and 100%)."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n and n > 0, got {successes}/{n}")
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


@dataclass
class EvalResult:
    """Per-episode outcomes of an evaluation."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    """``info["success"]`` at each episode's last step; empty on a task without a success rule (``env.has_success``)."""
    timeouts: list[bool] = field(default_factory=list)
    """Whether each episode ran to the time limit (truncated) rather than being terminated: survival, on tasks
    whose terminations are all failures (g1_stand, g1_walk: a fall or a tip). Empty on a task without terminations
    (``env.has_terminations``: every episode runs to the limit)."""
    targets: list[str] = field(default_factory=list)
    """Language tasks: the target each episode's instruction named (the env's, whatever the policy was told)."""
    commands: int = 0
    """Env steps whose joint targets were checked against the deploy safety layer (position-controlled sim envs)."""
    commands_beyond_safety: int = 0
    """Of those, steps with a joint target the policy node's safety layer would change: past a joint limit or more
    than robot.yaml's ``safety.max_step_change`` from the env's last command (:func:`sim.tasks.terms.action_excess`
    > 0)."""

    def summary(self) -> dict[str, Any]:
        """Means with 95% intervals: normal for return and length, Wilson for success and survival rates
        (:func:`success_summary`, :func:`survival_summary`: each where it was recorded, i.e. where the task defines
        it); a language task's success per named
        target under ``success_by_target`` (``{target: {episodes, success_rate, success_ci95}}``)."""
        n = len(self.returns)
        ret, ret_half = mean_ci(self.returns)
        length, len_half = mean_ci([float(x) for x in self.lengths])
        out = {
            "episodes": n,
            "return_mean": ret,
            "return_ci95": [ret - ret_half, ret + ret_half],
            "length_mean": length,
            "length_ci95": [length - len_half, length + len_half],
        }
        if self.successes:
            out.update(success_summary(self.successes))
        if self.timeouts:
            out.update(survival_summary(self.timeouts))
        if self.commands:
            out["commands_beyond_safety"] = self.commands_beyond_safety / self.commands
        if self.targets:
            out["success_by_target"] = {
                name: {"episodes": sum(t == name for t in self.targets),
                       **success_summary([s for s, t in zip(self.successes, self.targets, strict=True) if t == name])}
                for name in sorted(set(self.targets))}
        return out


def success_summary(successes: list[bool]) -> dict[str, Any]:
    """``{"success_rate", "success_ci95"}`` (Wilson) of per-episode outcomes (at least one)."""
    k, n = int(sum(successes)), len(successes)
    return {"success_rate": k / n, "success_ci95": list(wilson_interval(k, n))}


def survival_summary(timeouts: list[bool]) -> dict[str, Any]:
    """``{"survival_rate", "survival_ci95"}`` (Wilson): the fraction of episodes (at least one) that ended by the
    time limit, ``timeouts[i]`` True, rather than by a termination (a fall)."""
    k, n = int(sum(timeouts)), len(timeouts)
    ci = wilson_interval(k, n)  # ValueError on no episodes
    return {"survival_rate": k / n, "survival_ci95": list(ci)}


class EnvPlayer(abc.ABC):
    """A policy that reads more of the env than ``obs["policy"]`` (cameras, instructions, joint positions):
    :func:`evaluate` calls :meth:`act` with the env and every observation group."""

    @abc.abstractmethod
    def act(self, env: Any, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Action ``[N, A]`` for this step of ``env`` (a ``sim.VecEnv``) and its observation groups ``obs``."""

    @abc.abstractmethod
    def reset(self, done: torch.Tensor) -> None:
        """Forget per-env plans where ``done`` ``[N]`` bool is set."""


@torch.no_grad()
def evaluate(
    policy: nn.Module | Callable[[torch.Tensor], torch.Tensor] | EnvPlayer,
    env: Any,
    episodes: int,
    seed: int = 0,
    video_path: str | Path | None = None,
    video_size: tuple[int, int] = (480, 360),
    on_done: Callable[[torch.Tensor], None] | None = None,
) -> EvalResult:
    """Run ``episodes`` complete episodes of the deterministic ``policy`` on a ``sim.VecEnv``.

    Each env ``i`` contributes a fixed quota of episodes (``episodes`` split evenly), so short
    episodes are not over-represented. An episode's success is ``info["success"]`` at its last
    step; it survived (:attr:`EvalResult.timeouts`) if it was truncated, not terminated. On a position-controlled
    :class:`sim.env.TaskEnv` every counted step's joint targets are checked against the deploy safety layer
    (:attr:`EvalResult.commands_beyond_safety`; the env's previous command stands for the node's, exact where the
    env applies the same rate limit: a run trained under it, ``robot-rl eval --rate-limit``). With ``video_path``,
    env 0's first episode is rendered to an mp4. On a language task each episode's
    named target is kept (:attr:`EvalResult.targets`).

    Args:
        policy: raw ``obs["policy"]`` ``[N, D]`` -> action ``[N, A]``, or an :class:`EnvPlayer`.
        on_done: called after every step with ``done`` ``[N]`` bool: a policy that plans ahead passes its
            ``reset`` (a :class:`~robot_rl.models.chunked_actor.ChunkPlayer` of :func:`playable`, an artifact's
            chunk executor) so finished envs drop their plans.
    """
    if episodes < 1:
        raise ValueError(f"evaluate needs episodes >= 1, got {episodes}")
    N = env.num_envs
    quota = torch.tensor([episodes // N + (i < episodes % N) for i in range(N)], device=env.device)
    count = torch.zeros(N, dtype=torch.long, device=env.device)
    ep_ret = torch.zeros(N, device=env.device)
    ep_len = torch.zeros(N, dtype=torch.long, device=env.device)
    result = EvalResult()
    frames: list[np.ndarray] = []
    recording = video_path is not None
    obs = env.reset(seed=seed)
    check_commands = has_joint_targets(env)
    max_steps = int(quota.max()) * env.max_episode_steps + 1
    for _ in range(max_steps):
        if bool((count >= quota).all()):
            break
        if recording:
            frames.append(env.render(0, *video_size))
        named = env.instruction_targets() if env.has_instructions else None
        action = policy.act(env, obs) if isinstance(policy, EnvPlayer) else policy(obs["policy"])
        action = action.clamp(env.action_low, env.action_high)
        if check_commands:
            counted = count < quota
            result.commands += int(counted.sum())
            beyond = action_excess(env, action) > EXCESS_TOLERANCE
            result.commands_beyond_safety += int((counted & beyond).sum())
        step = env.step(action)
        ep_ret += step.reward
        ep_len += 1
        done = step.terminated | step.truncated
        if on_done is not None:
            on_done(done)
        success = step.info.get("success", torch.zeros_like(done))
        take = done & (count < quota)
        result.returns += ep_ret[take].tolist()
        result.lengths += ep_len[take].tolist()
        if env.has_success:
            result.successes += success[take].tolist()
        if env.has_terminations:
            result.timeouts += (step.truncated & ~step.terminated)[take].tolist()
        if named is not None:
            result.targets += [named[i] for i in torch.nonzero(take).squeeze(1).tolist()]
        count += take.long()
        ep_ret[done] = 0.0
        ep_len[done] = 0
        if recording and bool(done[0]):
            frames.append(env.render(0, *video_size))
            write_mp4(frames, Path(video_path), fps=round(1.0 / env.dt))
            recording = False
        obs = step.obs
    if len(result.returns) != episodes:
        raise RuntimeError(
            f"evaluation finished {len(result.returns)}/{episodes} episodes in {max_steps} steps"
        )
    return result


def playable(agent: Agent, instruction_shift: int = 0, noise_scale: float = 0.0,
             seed: int = 0) -> ChunkPlayer | EnvPlayer:
    """``agent.policy()`` as :func:`evaluate` plays it (pass ``on_done=player.reset``): through a
    :class:`~robot_rl.models.chunked_actor.ChunkPlayer` with the agent's chunk execution, as deployed (one action
    per query plays each query's action: the policy's own output); a VLA policy (``agent.policy_inputs == "vla"``)
    through a :class:`robot_rl.train.vla_eval.VLAPlayer`, told the instructions shifted by ``instruction_shift``
    targets (0: the right ones) and, with ``noise_scale`` > 0, decoding each chunk from ``N(0, noise_scale^2 I)``
    (seeded by ``seed``) instead of zero noise."""
    chunk_len, execution = agent.policy_chunking()
    if agent.policy_inputs == "vla":
        from robot_rl.train.vla_eval import VLAPlayer  # the [vla] extra (tokenizers) only for VLA runs

        return VLAPlayer(agent.policy(), execution, instruction_shift, noise_scale, seed)
    if noise_scale:
        raise InputError("a sampled-noise evaluation needs a VLA policy (agent=vla, vla_ppo, vla_guided)",
                         key="--noise-scale", value=noise_scale, fix="drop --noise-scale for this run")
    if instruction_shift:
        raise InputError("a wrong instruction needs a VLA policy (agent=vla)", key="--wrong-instruction",
                         fix="drop --wrong-instruction for this run")
    return ChunkPlayer(agent.policy(), chunk_len, agent.env.action_dim, execution)


def write_mp4(frames: list[np.ndarray], path: Path, fps: int) -> Path:
    """Encode ``[H, W, 3]`` uint8 frames as H.264 mp4 (written to a temp name, then renamed)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    h, w = frames[0].shape[:2]
    with av.open(str(tmp), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=max(1, fps))
        stream.width, stream.height = w - w % 2, h - h % 2
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame[: stream.height, : stream.width]))
            container.mux(stream.encode(image))
        container.mux(stream.encode())
    tmp.replace(path)
    return path
