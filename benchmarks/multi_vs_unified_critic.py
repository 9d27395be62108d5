"""Per-group critics vs one unified critic with PPO on g1_reach_walk, at equal env-step budgets.

Both arms run the same PPO and the same network (``critic=multi``); only ``agent.per_group_values``
differs: ``true`` learns one value per reward group (locomotion, manipulation) and normalises
advantages per group before the weighted sum; ``false`` learns one value of the summed reward.
After training each run is evaluated with the deterministic policy: reach rate (episodes in which
the task's success flag was ever set) and time-to-target (first success step, reached episodes).

Usage (defaults are sized for a 2-core machine and far below what PPO needs on G1; the literature
trains ~1e8-1e9 steps with 4096 GPU envs, e.g. ``--steps 200000000 --num-envs 4096 --device cuda``)::

    ROBOT_RL_ASSETS=../shared/robots python benchmarks/multi_vs_unified_critic.py --steps 20000 --seeds 0
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from robot_rl.config import compose
from robot_rl.train.on_policy_runner import OnPolicyRunner


@torch.no_grad()
def reach_stats(runner: OnPolicyRunner, episodes: int, seed: int) -> tuple[float, float]:
    """``(reach rate, mean first-success step of reached episodes)`` over ``episodes`` episodes."""
    env = runner.env_factory(episodes, seed)
    policy = runner.agent.policy()
    obs = env.reset(seed=seed)
    first = torch.full((episodes,), -1, dtype=torch.long)
    finished = torch.zeros(episodes, dtype=torch.bool)
    for t in range(env.max_episode_steps):
        step = env.step(policy(obs["policy"]).clamp(env.action_low, env.action_high))
        hit = step.info["success"].cpu() & (first < 0) & ~finished
        first[hit] = t + 1
        finished |= (step.terminated | step.truncated).cpu()
        if bool(finished.all()):
            break
        obs = step.obs
    reached = first > 0
    rate = float(reached.float().mean())
    return rate, float(first[reached].float().mean()) if bool(reached.any()) else float("nan")


def run(per_group: bool, steps: int, seed: int, num_envs: int, device: str, episodes: int) -> dict[str, float]:
    """Train one arm and evaluate it."""
    cfg = compose([
        "task.name=g1_reach_walk", f"task.num_envs={num_envs}", f"task.total_steps={steps}", f"seed={seed}",
        "agent=ppo", "critic=multi", f"agent.per_group_values={str(per_group).lower()}",
        f"sim.device={device}", "logger=none", "logger.progress=false", "eval_episodes=0", "export_formats=[]",
    ])
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.monotonic()
        runner = OnPolicyRunner(cfg, Path(run_dir))
        result = runner.learn(evaluate_and_export=False)
        rate, time_to_target = reach_stats(runner, episodes, seed + 1000)
    return {"reach": rate, "time_to_target": time_to_target, "wall_s": time.monotonic() - start,
            "train_return": result.final_stats.get("episode/return", float("nan"))}


def main() -> None:
    """Run both arms for every seed and print them side by side with ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run (default 20000)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--episodes", type=int, default=16, help="evaluation episodes per run")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: dict[str, list[dict[str, float]]] = {"per_group": [], "unified": []}
    for seed in seeds:
        for arm in rows:
            out = run(arm == "per_group", args.steps, seed, args.num_envs, args.device, args.episodes)
            rows[arm].append(out)
            print(f"seed {seed} {arm:9s} reach {out['reach']:.3f} time-to-target {out['time_to_target']:.1f} "
                  f"train return {out['train_return']:.2f} ({out['wall_s']:.0f} s)", flush=True)
    print(f"\ng1_reach_walk, PPO, {args.steps} env steps x {len(seeds)} seed(s), {args.num_envs} envs")
    print(f"{'metric':16s} {'per-group':>10s} {'unified':>10s} {'ratio':>8s}")
    for key in ("reach", "time_to_target", "train_return", "wall_s"):
        a = statistics.fmean(r[key] for r in rows["per_group"])
        b = statistics.fmean(r[key] for r in rows["unified"])
        ratio = a / b if b != 0 and not math.isnan(b) else float("nan")
        print(f"{key:16s} {a:10.3f} {b:10.3f} {ratio:8.3f}")


if __name__ == "__main__":
    main()
