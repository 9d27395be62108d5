"""The critic report of a run: PNG figures and a markdown page written into ``<run>/critic_report/``.

Figures (matplotlib, Agg backend):

- ``values_vs_returns.png`` — predicted value (member mean and min..max band) against the realised
  discounted return along the first evaluation episodes, one panel per value group;
- ``scatter.png`` — prediction against realised return over every counted step;
- ``bias_over_training.png`` — overestimation bias and absolute error at every kept checkpoint;
- ``disagreement.png`` — ensemble standard deviation along the episodes (critics with ``E > 1``).

Per-group values appear as separate panels and rows when the critic has ``G > 1`` (``critic=multi``
with ``agent.per_group_values=true``). For chunked critics the report adds *execute vs re-plan*: the
critic's value of the planned chunk and the realised return at episode start, when the policy re-plans
every step and when it executes whole chunks open loop. An agent whose critic scores chunks where they start
(``agent=vla_rl``) is compared there only, with complete returns (its value ends at the time limit).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.diagnostics.value_traces import (
    EpisodeTrace,
    ValueStats,
    collect_chunk_traces,
    collect_traces,
    value_stats,
)


@dataclass
class CheckpointPoint:
    """Critic statistics of one checkpoint: ``env_steps`` and its :class:`ValueStats`."""

    env_steps: int
    stats: ValueStats


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Write a figure atomically (temp file + rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}_", suffix=".png", dir=path.parent)
    os.close(fd)
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    os.replace(tmp, path)
    return path


def plot_values_vs_returns(traces: list[EpisodeTrace], groups: list[str], path: Path, max_episodes: int = 4) -> Path:
    """Predicted vs realised along the first ``max_episodes`` episodes, a panel per group."""
    plt = _pyplot()
    G = traces[0].values.shape[-1]
    fig, axes = plt.subplots(G, 1, figsize=(9, 3.2 * G), squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for g in range(G):
        ax = axes[g, 0]
        offset = 0
        for k, trace in enumerate(traces[:max_episodes]):
            steps = np.arange(offset, offset + len(trace.returns))
            c = colors[k % len(colors)]
            ax.plot(steps, trace.values[:, :, g].mean(1), color=c, label="predicted" if k == 0 else None)
            ax.fill_between(steps, trace.values[:, :, g].min(1), trace.values[:, :, g].max(1), color=c, alpha=0.2)
            ax.plot(steps, trace.returns[:, g], color=c, linestyle="--", label="realised" if k == 0 else None)
            uncounted = ~trace.counted
            if uncounted.any():  # only with tail="exclude"
                ax.axvspan(steps[uncounted][0], steps[-1], color="grey", alpha=0.1)
            offset += len(trace.returns) + 5
        ax.set_title(f"value vs realised discounted return: {groups[g]}")
        ax.set_xlabel("step (episodes side by side; grey = time-limit tail not counted)")
        ax.legend(loc="best")
    return _save(fig, path)


def plot_scatter(traces: list[EpisodeTrace], groups: list[str], path: Path) -> Path:
    """Prediction against realised return over all counted steps, a panel per group."""
    plt = _pyplot()
    values = np.concatenate([t.values[t.counted] for t in traces]).mean(1)
    returns = np.concatenate([t.returns[t.counted] for t in traces])
    G = values.shape[-1]
    fig, axes = plt.subplots(1, G, figsize=(4.2 * G, 4), squeeze=False)
    for g in range(G):
        ax = axes[0, g]
        ax.scatter(returns[:, g], values[:, g], s=4, alpha=0.4)
        both = np.concatenate([returns[:, g], values[:, g]])
        lo, hi = float(both.min()), float(both.max())
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=1)
        ax.set_xlabel("realised discounted return")
        ax.set_ylabel("predicted")
        ax.set_title(groups[g])
    return _save(fig, path)


def plot_bias_over_training(points: list[CheckpointPoint], groups: list[str], path: Path) -> Path:
    """Bias (prediction - realised) and absolute error per checkpoint."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    steps = [p.env_steps for p in points]
    for g, name in enumerate(groups):
        ax.plot(steps, [p.stats.bias[g] for p in points], marker="o", label=f"bias {name}")
        ax.plot(steps, [p.stats.abs_error[g] for p in points], marker="x", linestyle="--", label=f"|error| {name}")
    ax.axhline(0.0, color="black", linewidth=1)
    ax.set_xlabel("env steps (kept checkpoints)")
    ax.set_ylabel("predicted - realised")
    ax.legend(loc="best")
    return _save(fig, path)


def plot_disagreement(traces: list[EpisodeTrace], path: Path, max_episodes: int = 4) -> Path:
    """Member standard deviation (summed over groups) along the first episodes."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3))
    offset = 0
    for trace in traces[:max_episodes]:
        steps = np.arange(offset, offset + len(trace.values))
        ax.plot(steps, trace.values.std(1).sum(-1))
        offset += len(trace.values) + 5
    ax.set_xlabel("step (episodes side by side)")
    ax.set_ylabel("ensemble std")
    return _save(fig, path)


def execute_vs_replan_lines(replan: list[EpisodeTrace], open_loop: list[EpisodeTrace], chunk_len: int) -> list[str]:
    """Report lines comparing chunked execution modes: predicted and realised return at episode start."""
    def start(traces: list[EpisodeTrace]) -> tuple[float, float, float]:
        predicted = float(np.mean([t.values[0].mean(0).sum() for t in traces]))
        realised = float(np.mean([t.returns[0].sum() for t in traces]))
        return predicted, realised, float(np.mean([t.success for t in traces]))

    lines = [f"execute vs re-plan (chunks of {chunk_len}; values at the first step of each episode):"]
    for name, traces in (("re-plan every step", replan), ("execute whole chunks", open_loop)):
        predicted, realised, success = start(traces)
        lines.append(f"{name}: predicted Q {predicted:.4g}, realised return {realised:.4g}, success {success:.3f}")
    return lines


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def write_markdown(
    path: Path, title: str, info: dict[str, Any], stats: ValueStats, groups: list[str],
    points: list[CheckpointPoint], figures: list[str], notes: list[str],
) -> Path:
    """The report page: settings, the statistics table per group, figures, notes."""
    lines = [f"# Critic report: {title}", ""]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    lines += ["", "## Latest checkpoint", "",
              "| group | bias (pred - realised) | mean abs error | correlation | ensemble std |",
              "|---|---|---|---|---|"]
    for g, name in enumerate(groups):
        lines.append(f"| {name} | {_fmt(stats.bias[g])} | {_fmt(stats.abs_error[g])} | "
                     f"{_fmt(stats.correlation[g])} | {_fmt(stats.disagreement[g])} |")
    lines += ["", f"{stats.steps} counted steps; success rate {stats.extra['success_rate']:.3f}.", "",
              "## Over training", "", "| env steps | " + " | ".join(f"bias {g}" for g in groups) + " |",
              "|---|" + "---|" * len(groups)]
    for p in points:
        lines.append(f"| {p.env_steps} | " + " | ".join(_fmt(b) for b in p.stats.bias) + " |")
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


def build_report(
    agent: Any,
    make_env: Callable[[int, int], Any],
    checkpoints: list[tuple[int, Callable[[], None]]],
    out_dir: Path,
    episodes: int,
    num_envs: int,
    seed: int,
    title: str,
    tail: str = "bootstrap",
) -> Path:
    """Evaluate the critic at every checkpoint, then draw and write the report; returns ``report.md``.

    Args:
        agent: the run's agent (``critic``, ``act``, ``cfg.gamma``).
        make_env: ``(num_envs, seed) -> sim.VecEnv``.
        checkpoints: ``(env_steps, load)`` oldest first; ``load()`` puts that checkpoint into ``agent``.
            The last one is the run's state the main figures show.
        episodes: evaluation episodes at the latest checkpoint (earlier ones use half, at least 2).
        tail: time-limit cuts: ``bootstrap`` or ``exclude`` (see :mod:`robot_rl.diagnostics.value_traces`).
    """
    if not checkpoints:
        raise ValueError("no checkpoints to report on: train the run first (robot-rl train)")
    out_dir.mkdir(parents=True, exist_ok=True)
    gamma = float(agent.cfg.gamma)
    env = make_env(num_envs, seed)
    at_chunk_starts = agent.critic_at_chunk_starts

    def collect(count: int) -> list[EpisodeTrace]:
        if at_chunk_starts:
            return collect_chunk_traces(agent, env, count, gamma, seed)
        return collect_traces(agent, env, count, gamma, seed, tail)

    points: list[CheckpointPoint] = []
    for env_steps, load in checkpoints[:-1]:
        load()
        points.append(CheckpointPoint(env_steps, value_stats(collect(max(2, episodes // 2)))))
    env_steps, load = checkpoints[-1]
    load()
    traces = collect(episodes)
    stats = value_stats(traces)
    points.append(CheckpointPoint(env_steps, stats))
    G = traces[0].values.shape[-1]
    env_groups = list(env.reward_groups)
    groups = env_groups if G > 1 and len(env_groups) == G else (["total"] if G == 1 else [f"g{g}" for g in range(G)])
    figures = [
        plot_values_vs_returns(traces, groups, out_dir / "values_vs_returns.png").name,
        plot_scatter(traces, groups, out_dir / "scatter.png").name,
        plot_bias_over_training(points, groups, out_dir / "bias_over_training.png").name,
    ]
    E = traces[0].values.shape[1]
    notes = []
    if E > 1:
        figures.append(plot_disagreement(traces, out_dir / "disagreement.png").name)
    else:
        notes.append("single-network critic: no ensemble disagreement to show")
    chunk_len = agent.policy_chunking()[0]
    if at_chunk_starts:
        notes.append("values at chunk starts only (the critic scores a whole chunk where it begins; plots' x axis "
                     "counts chunks); a SAC critic (agent=vla_rl method=dsrl) learns a soft value that includes the "
                     "entropy bonus, so some positive bias is expected there; execute vs re-plan: not applicable, "
                     "the agent always plays its chunks")
    elif chunk_len == 1:
        notes.append("execute vs re-plan: not applicable, the policy plays single actions (chunk_len = 1)")
    else:
        open_loop = collect_traces(agent, env, episodes, gamma, seed, tail, execution="open_loop")
        notes += execute_vs_replan_lines(traces, open_loop, chunk_len)
    notes.append(f"{len(points)} checkpoint(s) kept in the run (the runner keeps the newest 3)")
    info = {"critic": type(agent.critic).__name__, "members": E, "value groups": ", ".join(groups),
            "gamma": gamma, "episodes": episodes, "seed": seed,
            "time-limit tails": "none: the critic's value ends at the time limit too" if at_chunk_starts
            else "completed by gamma^(T-t) V(final obs) (the critic's own value)" if tail == "bootstrap"
            else "steps with gamma^(T-t) > 0.05 before a time-limit cut are excluded"}
    return write_markdown(out_dir / "report.md", title, info, stats, groups, points, figures, notes)
