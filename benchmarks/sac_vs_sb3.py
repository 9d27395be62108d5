"""Our SAC vs stable-baselines3's SAC on HalfCheetah-v5: same hyperparameters, same seeds, side by side.

Both drive gymnasium's HalfCheetah-v5 (ours through ``sim.make_env("gym:HalfCheetah-v5")``, the
VecEnv adapter over the same gymnasium env) with SB3's SAC defaults: lr 3e-4 (actor, critics,
temperature), batch 256, buffer 1e6, tau 0.005, gamma 0.99, one gradient step per env step,
automatic temperature from 1.0 with target entropy -6, two [256, 256] ReLU critics, and
``--learning-starts`` random steps (rl-zoo uses 10000 for HalfCheetah). Reported per seed: training
wall-clock (collection + updates, evaluation excluded) and the mean deterministic return over
``--eval-episodes`` full 1000-step episodes; then the means and the ratios ours/SB3.

The issue's target is 100k steps x 3 seeds (the default; hours on CPU). ``--steps`` shortens it:

    python benchmarks/sac_vs_sb3.py --steps 5000 --seeds 0 --learning-starts 1000

``--parallel`` runs the two libraries at the same time in two processes, one per library, each
going through the seeds in order (one core each on a 2-core machine), so both see the same machine
load; the table is printed when both are done. Each library's wall-clock is then that of one core
while the other core is busy (with the peer, or idle once the faster library has finished).

The rows (one per seed and library: training wall and CPU seconds, final return) and the means go to
``--out`` (default ``docs/results/agents/sac_vs_sb3.json``, with the command, commit, load and machine).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _results import RESULTS, write_rows

from robot_rl.agents.base import Agent

SB3_DEFAULTS = {"learning_rate": 3e-4, "batch_size": 256, "buffer_size": 1_000_000, "tau": 0.005, "gamma": 0.99}


class Clock:
    """Training wall/CPU seconds since :meth:`start`, with evaluation time excluded."""

    def start(self) -> None:
        """Start counting."""
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        """(wall, CPU) seconds of training so far."""
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0

    def exclude(self, fn: Callable[[], float]) -> float:
        """Run ``fn`` (an evaluation) without counting its time; returns its result."""
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        self.wall0 += time.perf_counter() - wall
        self.cpu0 += time.process_time() - cpu
        return result


def report(name: str, seed: int, step: int, clock: Clock, ret: float) -> None:
    """One progress line: training time so far and the deterministic return at ``step``."""
    wall, cpu = clock.read()
    print(f"  seed {seed} {name} step {step}: train wall {wall:.1f} s, train CPU {cpu:.1f} s, return {ret:.1f}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


def run_ours(steps: int, seed: int, learning_starts: int, eval_episodes: int, amp: str,
             eval_every: int) -> tuple[float, float, float]:
    """Train our SAC; returns (training wall seconds, training CPU seconds, mean deterministic eval return)."""
    import sim
    from robot_rl.agents.base import EnvSpec, make_agent
    from robot_rl.compose import compose

    torch.manual_seed(seed)
    cfg = compose([
        "agent=sac", "critic=ensemble", "critic.hidden_dims=[256,256]", "critic.activation=relu",
        f"agent.learning_starts={learning_starts}", f"agent.batch_size={SB3_DEFAULTS['batch_size']}",
        f"agent.buffer_size={min(SB3_DEFAULTS['buffer_size'], steps)}", f"agent.tau={SB3_DEFAULTS['tau']}",
        f"agent.gamma={SB3_DEFAULTS['gamma']}", f"agent.actor_lr={SB3_DEFAULTS['learning_rate']}",
        f"agent.critic_lr={SB3_DEFAULTS['learning_rate']}", f"agent.alpha_lr={SB3_DEFAULTS['learning_rate']}",
        "agent.utd_ratio=1.0", "agent.init_alpha=1.0", "agent.actor_hidden_dims=[256,256]",
        "agent.activation=relu", "agent.normalize_obs=false", f"agent.amp={amp}",
    ])
    env = sim.make_env("gym:HalfCheetah-v5", num_envs=1, seed=seed)
    agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(env))
    obs = env.reset(seed=seed)
    clock = Clock()
    clock.start()
    for i in range(1, steps + 1):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()
        if eval_every and i % eval_every == 0 and i < steps:
            ret = clock.exclude(lambda: evaluate_ours(agent, seed + 1000, eval_episodes))
            report("ours", seed, i, clock, ret)
    wall, cpu = clock.read()
    return wall, cpu, evaluate_ours(agent, seed + 1000, eval_episodes)


def evaluate_ours(agent: Agent, seed: int, episodes: int) -> float:
    """Mean return of ``episodes`` deterministic episodes run side by side."""
    import sim

    env = sim.make_env("gym:HalfCheetah-v5", num_envs=episodes, seed=seed)
    obs = env.reset(seed=seed)
    total = torch.zeros(episodes)
    finished = torch.zeros(episodes, dtype=torch.bool)
    while not bool(finished.all()):
        step = env.step(agent.act(obs, deterministic=True))
        total += step.reward * ~finished
        finished |= step.terminated | step.truncated
        obs = step.obs
    return float(total.mean())


def run_sb3(steps: int, seed: int, learning_starts: int, eval_episodes: int,
            eval_every: int) -> tuple[float, float, float]:
    """Train stable-baselines3's SAC; returns (training wall s, training CPU s, mean deterministic eval return)."""
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    env = gym.make("HalfCheetah-v5")
    model = SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, device="cpu",
                policy_kwargs={"net_arch": [256, 256]}, **{**SB3_DEFAULTS, "buffer_size": min(1_000_000, steps)})
    eval_env = gym.make("HalfCheetah-v5")

    def evaluate() -> float:
        eval_env.reset(seed=seed + 1000)
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes, deterministic=True, warn=False)
        return float(mean)

    clock = Clock()

    class Progress(BaseCallback):
        """Evaluates every ``eval_every`` steps, outside the training clock."""

        def _on_step(self) -> bool:
            if eval_every and self.num_timesteps % eval_every == 0 and self.num_timesteps < steps:
                report("sb3", seed, self.num_timesteps, clock, clock.exclude(evaluate))
            return True

    clock.start()
    model.learn(total_timesteps=steps, callback=Progress())
    wall, cpu = clock.read()
    return wall, cpu, evaluate()


def run_library(name: str, seeds: list[int], args: argparse.Namespace) -> dict[int, tuple[float, float, float]]:
    """Every seed of one library in order; ``{seed: (wall, CPU, return)}`` (one ``--parallel`` worker, or one
    seed at a time in the sequential mode)."""
    torch.set_num_threads(args.threads)
    done = {}
    for seed in seeds:
        if name == "ours":
            done[seed] = run_ours(args.steps, seed, args.learning_starts, args.eval_episodes, args.amp, args.eval_every)
        else:
            done[seed] = run_sb3(args.steps, seed, args.learning_starts, args.eval_episodes, args.eval_every)
        _final(name, seed, args.steps, done[seed])
    return done


def _final(name: str, seed: int, steps: int, result: tuple[float, float, float]) -> None:
    wall, cpu, ret = result
    print(f"  seed {seed} {name} step {steps} (final): train wall {wall:.1f} s, train CPU {cpu:.1f} s, "
          f"return {ret:.1f}, load average {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    """Run both libraries for every seed and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (target: 100000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learning-starts", type=int, default=10_000, help="random steps before learning")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic 1000-step episodes")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both libraries)")
    parser.add_argument("--amp", choices=["none", "bf16"], default="bf16",
                        help="our agent.amp (bf16: hidden-layer matmuls in bfloat16, fp32 master weights)")
    parser.add_argument("--peer-first", action="store_true",
                        help="run SB3 before ours in each seed (interleave when seeds run as parallel processes)")
    parser.add_argument("--only", choices=["both", "ours", "sb3"], default="both",
                        help="run one library (e.g. one process per library and seed); the table needs both")
    parser.add_argument("--eval-every", type=int, default=20_000,
                        help="also evaluate every this many steps, printing a progress line (0 = only at the end)")
    parser.add_argument("--parallel", action="store_true",
                        help="run the two libraries at the same time, one process each (seeds in order in each)")
    parser.add_argument("--out", type=Path, default=RESULTS / "agents" / "sac_vs_sb3.json",
                        help="JSON file for the rows (default: %(default)s)")
    args = parser.parse_args()
    if args.learning_starts >= args.steps:
        parser.error(f"--learning-starts {args.learning_starts} must be < --steps {args.steps}")
    torch.set_num_threads(args.threads)
    print(f"HalfCheetah-v5, {args.steps} steps, seeds {args.seeds}, learning_starts {args.learning_starts}, "
          f"{args.threads} thread(s), ours agent.amp={args.amp}, load average {os.getloadavg()[0]:.1f}")
    print("wall and CPU seconds of training (evaluation excluded); CPU time is less sensitive to other load")
    header = ["seed", "ours wall", "sb3 wall", "ratio", "ours cpu", "sb3 cpu", "ratio", "ours ret", "sb3 ret"]
    print(" ".join(f"{h:>9s}" for h in header))
    results: dict[str, dict[int, tuple[float, float, float]]] = {}
    if args.parallel:
        if args.only != "both":
            parser.error("--parallel runs both libraries; drop --only")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(run_library, name, args.seeds, args) for name in ("ours", "sb3")}
            results = {name: f.result() for name, f in futures.items()}
        for seed in args.seeds:
            print(_row(str(seed), results["ours"][seed], results["sb3"][seed]), flush=True)
    else:
        order = ["sb3", "ours"] if args.peer_first else ["ours", "sb3"]
        for seed in args.seeds:
            for name in order if args.only == "both" else [args.only]:
                results.setdefault(name, {})[seed] = run_library(name, [seed], args)[seed]
            if args.only == "both":
                print(_row(str(seed), results["ours"][seed], results["sb3"][seed]), flush=True)
    rows = [{"seed": seed, "library": name, "train_wall_s": wall, "train_cpu_s": cpu, "return": ret}
            for name, done in results.items() for seed, (wall, cpu, ret) in done.items()]
    means = summary(results) if args.only == "both" else None
    write_rows(args.out, rows, settings={k: str(v) for k, v in vars(args).items()}, summary=means)
    if means is None:
        return
    print(_row("mean", means["ours"], means["sb3"]))
    print(f"wall-clock ratio ours/sb3 = {means['wall_ratio']:.2f} (target <= 0.5); CPU-time ratio "
          f"{means['cpu_ratio']:.2f}; mean return ours - sb3 = {means['return_diff']:+.1f} (target >= 0)")


def summary(results: dict[str, dict[int, tuple[float, float, float]]]) -> dict[str, object]:
    """Seed means of ``(wall, CPU, return)`` per library (``{"ours": {seed: ...}, "sb3": {seed: ...}}``), the
    ratios ours/sb3 of the mean wall and CPU seconds, and the difference of the mean returns."""
    means = {name: tuple(statistics.mean(r[i] for r in done.values()) for i in range(3))
             for name, done in results.items()}
    ours, peer = means["ours"], means["sb3"]
    return {"ours": ours, "sb3": peer, "wall_ratio": ours[0] / peer[0], "cpu_ratio": ours[1] / peer[1],
            "return_diff": ours[2] - peer[2]}


def _row(label: str, ours: tuple[float, float, float], peer: tuple[float, float, float]) -> str:
    """One table row: wall, CPU (each with the ours/sb3 ratio) and returns."""
    cells = [ours[0], peer[0], ours[0] / peer[0], ours[1], peer[1], ours[1] / peer[1], ours[2], peer[2]]
    return f"{label:>9s} " + " ".join(f"{c:9.2f}" for c in cells)


if __name__ == "__main__":
    main()
