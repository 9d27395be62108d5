"""How far is a VLA's sampled policy from its deployed one? One ``agent=vla`` (or ``agent=vla_ppo`` /
``agent=vla_guided``) run evaluated on the same episodes with each chunk decoded from initial noise
``N(0, S^2 I)`` for each scale ``S``; ``S = 0`` is the policy every evaluation, export and the ROS node play (zero
noise), ``S = 1`` the flow's own ``N(0, I)``, the noise RL post-training draws while it collects unless told
otherwise (``agent=vla_ppo``'s ``agent.initial_noise_scale``, ``agent=vla_rl``'s ``agent.noise_bound``).

    python benchmarks/vla_noise_scale.py outputs/bench_vla_sft/so101_reach_lang-mlp_notext_u1600_dart02

Prints success (Wilson 95% interval), mean return and success relative to zero noise per scale, and writes the
rows with the command and commit to ``docs/results/vla/noise_scale-<run name>.json`` (or ``--out``). Each scale is
``robot-rl eval <run> --noise-scale S`` with the same ``--episodes``, ``--num-envs`` and ``--seed``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _results import RESULTS, write_rows

from robot_rl.train.evaluation import evaluate, playable
from robot_rl.train.run_loading import open_run


def noise_rows(run: Path, scales: list[float], episodes: int, num_envs: int, seed: int) -> list[dict]:
    """One evaluation per scale: ``{noise_scale, success_rate, success_ci95, return_mean, return_ci95}``. One env
    serves every scale: :func:`evaluate` resets it with ``seed``, so each scale plays the same episodes."""
    runner = open_run(run, num_envs=num_envs)
    env = runner.env_factory(num_envs, seed)
    rows = []
    for scale in scales:
        player = playable(runner.agent, noise_scale=scale, seed=seed)
        summary = evaluate(player, env, episodes, seed, on_done=player.reset).summary()
        rows.append({"noise_scale": scale, "episodes": episodes, "num_envs": num_envs, "seed": seed,
                     **{k: summary[k] for k in ("success_rate", "success_ci95", "return_mean", "return_ci95")}})
        print(f"noise scale {scale:g}: success {summary['success_rate']:.0%}, return {summary['return_mean']:.1f}",
              flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: success, interval, return and success over the zero-noise row (``-`` without one)."""
    zero = next((r["success_rate"] for r in rows if r["noise_scale"] == 0), None)
    lines = ["| initial noise | success | 95% interval | return | success / zero noise |", "|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["success_ci95"]
        ratio = f"{r['success_rate'] / zero:.2f}x" if zero else "-"
        lines.append(f"| N(0, {r['noise_scale']:g}^2 I) | {r['success_rate']:.0%} | {lo:.0%}-{hi:.0%} | "
                     f"{r['return_mean']:.1f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run", type=Path, help="a VLA run directory (agent=vla, vla_ppo or vla_guided)")
    p.add_argument("--scales", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0],
                   help="initial noise standard deviations to evaluate (0: the deployed policy)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--num-envs", type=int, default=25, help="25: benchmarks/vla_rl.py's evaluation")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--out", type=Path, default=None, help="default: docs/results/vla/noise_scale-<run name>.json")
    args = p.parse_args(argv)
    if any(s < 0 for s in args.scales):
        p.error(f"--scales must be >= 0, got {args.scales}")
    torch.set_num_threads(1)
    rows = noise_rows(args.run, args.scales, args.episodes, args.num_envs, args.seed)
    print(table(rows))
    out = args.out or RESULTS / "vla" / f"noise_scale-{args.run.name}.json"
    write_rows(out, rows, ["benchmarks/vla_noise_scale.py", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
