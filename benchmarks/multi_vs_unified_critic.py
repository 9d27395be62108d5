"""Per-group critics vs one unified critic with PPO on g1_reach_walk, at equal env-step budgets.

Both arms run the same PPO and the same network (``critic=multi``); only ``agent.per_group_values``
differs: ``true`` learns one value per reward group (locomotion, manipulation) and normalises
advantages per group before the weighted sum; ``false`` learns one value of the summed reward.
After training each run is evaluated with the deterministic policy: reach rate (episodes in which
the task's success flag was ever set), time-to-target (first success step, reached episodes), the closest
the hand came to its target (a graded signal below the 5 cm success radius) and survival (share of the
episode before a fall).

Usage (defaults are sized for a 2-core machine and far below what PPO needs on G1; the literature
trains ~1e8-1e9 steps with 4096 GPU envs, e.g. ``--steps 200000000 --num-envs 4096 --device cuda``)::

    ROBOT_RL_ASSETS=../shared/robots python benchmarks/multi_vs_unified_critic.py --steps 20000 --seeds 0

The per-run rows go to ``--out`` (default ``docs/results/critics/multi_vs_unified_critic.json``, with the
command, commit, load and machine); ``--merge`` reports earlier ``--out`` files together.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from _results import RESULTS, write_rows

from robot_rl.compose import compose
from robot_rl.train.runner import Runner


@torch.no_grad()
def reach_stats(runner: Runner, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic-policy statistics over ``episodes`` episodes: ``reach`` (share of episodes in which the
    success flag was ever set), ``time_to_target`` (mean first-success step of reached episodes, nan if none),
    ``min_distance`` (mean over episodes of the closest the right hand came to its target, metres: a graded
    signal where no arm reaches) and ``survival`` (mean share of the episode's steps before it ended or fell)."""
    from sim.tasks.g1_reach_walk import hand_distance

    env = runner.env_factory(episodes, seed)
    policy = runner.agent.policy()
    obs = env.reset(seed=seed)
    first = torch.full((episodes,), -1, dtype=torch.long)
    closest = torch.full((episodes,), float("inf"))
    alive = torch.zeros(episodes)
    finished = torch.zeros(episodes, dtype=torch.bool)
    for t in range(env.max_episode_steps):
        closest = torch.where(finished, closest, torch.minimum(closest, hand_distance(env).cpu()))
        step = env.step(policy(obs["policy"]).clamp(env.action_low, env.action_high))
        hit = step.info["success"].cpu() & (first < 0) & ~finished
        first[hit] = t + 1
        alive += (~finished).float()
        finished |= (step.terminated | step.truncated).cpu()
        if bool(finished.all()):
            break
        obs = step.obs
    reached = first > 0
    return {"reach": float(reached.float().mean()),
            "time_to_target": float(first[reached].float().mean()) if bool(reached.any()) else float("nan"),
            "min_distance": float(closest.mean()), "survival": float(alive.mean()) / env.max_episode_steps}


def run(per_group: bool, steps: int, seed: int, num_envs: int, device: str, episodes: int,
        one_thread: bool = False) -> dict[str, float]:
    """Train one arm and evaluate it (``one_thread``: one torch thread, for parallel jobs)."""
    if one_thread:
        torch.set_num_threads(1)
    cfg = compose([
        "task.name=g1_reach_walk", f"task.num_envs={num_envs}", f"task.total_steps={steps}", f"seed={seed}",
        "agent=ppo", "critic=multi", f"agent.per_group_values={str(per_group).lower()}",
        f"sim.device={device}", "logger=none", "logger.progress=false", "eval_episodes=0", "export_formats=[]",
    ])
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.monotonic()
        runner = Runner(cfg, Path(run_dir))
        result = runner.learn(evaluate_and_export=False)
        stats = reach_stats(runner, episodes, seed + 1000)
    return {**stats, "wall_s": time.monotonic() - start,
            "train_return": result.final_stats.get("episode/return", float("nan"))}


def main() -> None:
    """Run both arms for every seed and print them side by side with ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run (default 20000)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--episodes", type=int, default=16, help="evaluation episodes per run")
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, default=1, help="parallel runs (processes of one torch thread each)")
    p.add_argument("--out", type=Path, default=RESULTS / "critics" / "multi_vs_unified_critic.json",
                   help="JSON file for the per-run rows (default: %(default)s)")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="--out files of earlier runs (e.g. other seeds): report them together instead of training")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: dict[str, list[dict[str, float]]] = {"per_group": [], "unified": []}
    if args.merge:
        for f in args.merge:
            saved = json.loads(f.read_text())
            for arm, runs in saved["rows"].items():
                rows[arm].extend(runs)
            args.steps, args.num_envs, args.episodes = (saved["settings"][k] for k in ("steps", "num_envs", "episodes"))
    else:
        jobs = [(arm, seed) for seed in seeds for arm in rows]
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run, arm == "per_group", args.steps, seed, args.num_envs, args.device,
                                   args.episodes, args.jobs > 1) for arm, seed in jobs]
            for (arm, seed), future in zip(jobs, futures, strict=True):
                rows[arm].append({"seed": seed, **future.result()})
    for arm, runs in rows.items():
        for out in runs:
            print(f"seed {out['seed']} {arm:9s} reach {out['reach']:.3f} time-to-target {out['time_to_target']:.1f} "
                  f"closest {out['min_distance']:.3f} m survival {out['survival']:.3f} "
                  f"train return {out['train_return']:.2f} ({out['wall_s']:.0f} s)", flush=True)
    if not args.merge:
        write_rows(args.out, rows, settings={k: str(v) for k, v in vars(args).items()})
    print(f"\ng1_reach_walk, PPO, {len(rows['unified'])} seed(s); per run: {args.steps} env steps, "
          f"{args.num_envs} envs, {args.episodes} evaluation episodes")
    print(f"{'metric (seed mean)':19s} {'per-group':>10s} {'unified':>10s} {'ratio':>8s}")
    for key in ("reach", "time_to_target", "min_distance", "survival", "train_return", "wall_s"):
        a, b = (mean_finite([r[key] for r in rows[arm]]) for arm in ("per_group", "unified"))
        ratio = a / b if b != 0 and not math.isnan(b) else float("nan")
        print(f"{key:19s} {a:10.3f} {b:10.3f} {ratio:8.3f}")
    wins = sum(p["reach"] > u["reach"] for p, u in zip(rows["per_group"], rows["unified"], strict=True))
    ties = sum(p["reach"] == u["reach"] for p, u in zip(rows["per_group"], rows["unified"], strict=True))
    print(f"reach: per-group higher in {wins}, equal in {ties}, of {len(rows['unified'])} seeds "
          "(time_to_target: mean over the runs that reached at all)")


def mean_finite(values: list[float]) -> float:
    """Mean of the finite ``values`` (nan if none): runs that never reached have no time-to-target."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else float("nan")


if __name__ == "__main__":
    main()
