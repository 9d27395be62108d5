"""Chunked critic vs one-step critic on the sparse so101_lift task: success rate vs env steps.

Both arms are the same agent (``agent=chunked_td3``) with the same budget; only ``critic.chunk_len``
differs (``h`` vs 1; with 1 the agent is plain TD3 acting one step at a time). Every
``--eval-every`` env steps the deterministic policy is evaluated on fresh episodes. The issue's
target: the chunked arm reaches the one-step arm's final success in <= 0.5x the env steps.

Usage (defaults fit minutes on a 2-core machine; sparse lifting typically needs ~1e6+ steps,
e.g. ``--steps 2000000 --num-envs 64 --seeds 0,1,2``)::

    python benchmarks/chunked_vs_one_step.py --steps 60000 --seeds 0 --chunk-len 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.chunked_td3 import ChunkedTD3Config
from robot_rl.critics.chunked import ChunkedCriticConfig
from robot_rl.train.evaluation import evaluate


def run(task: str, chunk_len: int, steps: int, seed: int, num_envs: int, eval_every: int,
        episodes: int) -> list[tuple[int, float]]:
    """Train one arm; returns ``[(env_steps, success rate)]`` at every evaluation."""
    import sim

    torch.manual_seed(seed)
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    eval_env = sim.make_env(task, num_envs=min(episodes, 16), seed=seed + 1000)
    cfg = ChunkedTD3Config(learning_starts=5000, batch_size=256, utd_ratio=0.25, buffer_size=max(steps, 10_000))
    agent = make_agent(cfg, ChunkedCriticConfig(chunk_len=chunk_len), EnvSpec.from_env(env))
    curve: list[tuple[int, float]] = []
    obs = env.reset(seed=seed)
    next_eval = eval_every
    while agent.env_steps < steps:
        action = agent.act(obs)
        step = env.step(action.clamp(env.action_low, env.action_high))
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()
        if agent.env_steps >= next_eval or agent.env_steps >= steps:
            result = evaluate(agent.policy(), eval_env, episodes, seed=seed + 1000).summary()
            curve.append((agent.env_steps, result["success_rate"]))
            next_eval += eval_every
    return curve


def steps_to_reach(curve: list[tuple[int, float]], level: float) -> float:
    """First env step count at which ``curve`` reaches ``level`` (nan if never)."""
    return next((float(s) for s, v in curve if v >= level), float("nan"))


def main() -> None:
    """Run both arms per seed and print curves and the steps-to-match ratio."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="so101_lift")
    p.add_argument("--steps", type=int, default=60_000)
    p.add_argument("--chunk-len", type=int, default=5)
    p.add_argument("--seeds", default="0")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--episodes", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    finals, ratios = {"chunked": [], "one_step": []}, []
    for seed in seeds:
        start = time.monotonic()
        one = run(args.task, 1, args.steps, seed, args.num_envs, args.eval_every, args.episodes)
        chunked = run(args.task, args.chunk_len, args.steps, seed, args.num_envs, args.eval_every, args.episodes)
        print(f"seed {seed} ({time.monotonic() - start:.0f} s)\n  env steps : " + " ".join(f"{s:>7d}" for s, _ in one))
        print("  one-step  : " + " ".join(f"{v:7.3f}" for _, v in one))
        print(f"  chunked h={args.chunk_len}: " + " ".join(f"{v:7.3f}" for _, v in chunked), flush=True)
        finals["one_step"].append(one[-1][1])
        finals["chunked"].append(chunked[-1][1])
        target = one[-1][1]
        if target > 0:
            ratios.append(steps_to_reach(chunked, target) / steps_to_reach(one, target))
    print(f"\n{args.task}, {args.steps} env steps x {len(seeds)} seed(s)")
    print(f"final success  one-step {statistics.fmean(finals['one_step']):.3f}  "
          f"chunked {statistics.fmean(finals['chunked']):.3f}")
    if ratios:
        print(f"env steps for the chunked arm to reach the one-step arm's final success, as a ratio of the "
              f"one-step arm's: {statistics.fmean(ratios):.3f} (target <= 0.5)")
    else:
        print("one-step arm's final success is 0 in every seed: the steps-to-match ratio is undefined at this budget")


if __name__ == "__main__":
    main()
