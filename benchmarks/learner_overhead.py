"""Learner overhead: PPO training env-steps/s beside the VecEnv alone at the same env count, and the bound.

For a training config (default ``recipe=reach_fast``: PPO on ``so101_reach``, 128 envs) it measures, in one run:

- ``vecenv``: ``sim.make_env(task, N)`` stepping actions drawn uniformly in its bounds (a moving arm, as in
  training) for ``--vecenv-s`` seconds: env-steps per wall second and process CPU seconds per env step (every
  thread of MuJoCo's pool counted); one pass before the training pass and one after, averaged (:func:`bracketed`);
- ``training``: ``--steps`` env steps of the config's training (the Runner, no evaluation or export), split into
  the time inside ``env.step`` (the simulator), inside ``agent.update`` (the learner) and the rest (acting,
  storing, bookkeeping), each as wall and process CPU seconds;

then prints training / VecEnv throughput (issue 20's target: >= 0.7x) beside **the bound**: the fastest any
schedule of this work could train on this machine. Physics, acting and updates all cost CPU; the machine has
``C`` cores, so no overlap of physics with inference or updates can beat ``C`` cores doing the whole work::

    best training steps/s = C / (sim CPU s/step + update CPU s/step + rest CPU s/step)

with the simulator's CPU per step taken from the VecEnv-alone pass (it used every core), and the learner's and
the rest's from the training pass. A ratio target above the bound needs less learner arithmetic per sample
(smaller networks, fewer epochs) or more cores, not a better schedule.

    python benchmarks/learner_overhead.py                          # recipe=reach_fast, 400k steps per pass
    python benchmarks/learner_overhead.py --steps 200000 recipe=reach_fast agent.update_threads=0
    python benchmarks/learner_overhead.py task=so101_reach          # the default PPO (24 steps/env)

Where the config's update runs on several threads (``agent.update_threads``: 2 in ``recipe=reach_fast``, 0 in
``ppo.yaml``), a second pass
with the update at one thread measures the learner's CPU for the bound: several threads' CPU seconds include
OpenMP's spin-waiting, not work.

Rows go to ``--out`` (default ``docs/results/agents/learner_overhead.json``) with the command, commit, load
and machine; docs/training.md ("Where the time goes") shows the figures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
_SHARED_ROBOTS = Path(__file__).resolve().parents[2] / "shared" / "robots"
if "ROBOT_RL_ASSETS" not in os.environ and _SHARED_ROBOTS.is_dir():
    os.environ["ROBOT_RL_ASSETS"] = str(_SHARED_ROBOTS)

from _results import RESULTS, write_rows  # noqa: E402

import sim  # noqa: E402 - after the asset path is set
from robot_rl.compose import compose  # noqa: E402
from robot_rl.errors import InputError  # noqa: E402
from robot_rl.train.runner import Runner  # noqa: E402

TARGET = 0.7
"""Issue 20: PPO training throughput >= 0.7x the VecEnv alone at the same env count."""


@dataclass
class Clock:
    """Wall and process-CPU seconds accumulated over timed calls."""

    wall: float = 0.0
    cpu: float = 0.0

    def time(self, fn: Any, *args: Any) -> Any:
        """Call ``fn(*args)``, adding its wall and CPU seconds."""
        w, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args)
        finally:
            self.wall += time.perf_counter() - w
            self.cpu += time.process_time() - c


def vecenv_pass(task: str, num_envs: int, seconds: float, seed: int = 0) -> dict[str, float]:
    """The VecEnv alone with uniform random actions: ``{"steps_per_s", "cpu_per_step_us", "steps"}``."""
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    env.reset(seed=seed)
    low, high = env.action_low, env.action_high
    gen = torch.Generator().manual_seed(seed)

    def actions() -> torch.Tensor:
        return low + (high - low) * torch.rand(num_envs, env.action_dim, generator=gen)

    for _ in range(20):  # warm-up: pool threads started, caches filled
        env.step(actions())
    clock, steps = Clock(), 0
    while clock.wall < seconds:
        clock.time(env.step, actions())
        steps += num_envs
    return {"steps": steps, "steps_per_s": steps / clock.wall, "cpu_per_step_us": 1e6 * clock.cpu / steps}


def training_pass(overrides: list[str], steps: int, run_dir: Path) -> dict[str, Any]:
    """``steps`` env steps of the config's training, timed per part (see the module docstring)."""
    cfg = compose([*overrides, f"task.total_steps={steps}", "logger.progress=false", "logger.backends=[]"])
    runner = Runner(cfg, run_dir)
    sim_clock, update_clock = Clock(), Clock()
    env_step, agent_update = runner.env.step, runner.agent.update
    update_walls: list[float] = []

    def timed_update() -> Any:
        before = update_clock.wall
        try:
            return update_clock.time(agent_update)
        finally:
            update_walls.append(update_clock.wall - before)

    runner.env.step = lambda action: sim_clock.time(env_step, action)  # type: ignore[method-assign]
    runner.agent.update = timed_update  # type: ignore[method-assign]
    w, c = time.perf_counter(), time.process_time()
    result = runner.learn(evaluate_and_export=False)
    total = Clock(time.perf_counter() - w, time.process_time() - c)
    n = result.env_steps
    rest = Clock(total.wall - sim_clock.wall - update_clock.wall, total.cpu - sim_clock.cpu - update_clock.cpu)
    parts = {"sim": sim_clock, "update": update_clock, "rest": rest}
    once = one_time_update_s(update_walls)
    return {"task": cfg.task.name, "num_envs": cfg.task.num_envs, "steps": n, "steps_per_s": n / total.wall,
            "wall_s": total.wall, "cpu_s": total.cpu, "train_success": result.final_stats.get("episode/success"),
            "updates": len(update_walls), "first_update_wall_s": update_walls[0] if update_walls else 0.0,
            "one_time_update_wall_s": once, "steady_steps_per_s": n / (total.wall - once),
            **{f"{k}_wall_s": v.wall for k, v in parts.items()},
            **{f"{k}_cpu_per_step_us": 1e6 * v.cpu / n for k, v in parts.items()}}


def bracketed(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The VecEnv-alone figures as the mean of a pass before and one after the training pass (steps summed): this
    machine's throughput drifts between passes minutes apart (17.4k-21.3k env-steps/s for the same pass on
    2026-12-04/05), and a training pass between two VecEnv passes is compared with what the machine did around it."""
    return {"steps": before["steps"] + after["steps"],
            "steps_per_s": (before["steps_per_s"] + after["steps_per_s"]) / 2,
            "cpu_per_step_us": (before["cpu_per_step_us"] + after["cpu_per_step_us"]) / 2}


def one_time_update_s(walls: list[float]) -> float:
    """The first update's wall seconds beyond the median update's (``walls``: every update's, in order): a one-time
    cost, ``torch.compile``'s compilation where ``agent.compile_update`` is on; 0 when it was no slower."""
    if not walls:
        return 0.0
    median = sorted(walls)[len(walls) // 2]
    return max(0.0, walls[0] - median)


def in_fresh_process(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a new (spawned) process, one torch thread: each pass starts as cold as the others (a
    second training pass in the same process measured ~14% faster than the first, whatever its settings)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=torch.set_num_threads,
                             initargs=(1,)) as pool:
        return pool.submit(fn, *args).result()


def bound(vecenv_cpu_us: float, update_cpu_us: float, rest_cpu_us: float, cores: int) -> float:
    """Best training env-steps/s of any schedule: ``cores`` CPU-seconds per second over the CPU work of one env
    step (the simulator's, measured alone, plus the learner's and the rest's, measured in training)."""
    return cores * 1e6 / (vecenv_cpu_us + update_cpu_us + rest_cpu_us)


def summarise(vec: dict[str, float], train: dict[str, Any], cores: int, work: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """Ratios: training / VecEnv, the bound and bound / VecEnv, and each part's share of training wall time.
    ``work``: the pass whose learner and rest CPU the bound counts (default ``train``; a pass with the update at
    one thread where ``train``'s ran on several, whose CPU seconds include their spin-waiting)."""
    work = train if work is None else work
    best = bound(vec["cpu_per_step_us"], work["update_cpu_per_step_us"], work["rest_cpu_per_step_us"], cores)
    ratio, best_ratio = train["steps_per_s"] / vec["steps_per_s"], best / vec["steps_per_s"]
    steady = train.get("steady_steps_per_s", train["steps_per_s"]) / vec["steps_per_s"]
    return {"training_over_vecenv": ratio, "steady_over_vecenv": steady, "bound_steps_per_s": best,
            "bound_over_vecenv": best_ratio, "target": TARGET, "met": ratio >= TARGET, "steady_met": steady >= TARGET,
            "target_within_bound": best_ratio >= TARGET,
            "shares": {k: train[f"{k}_wall_s"] / train["wall_s"] for k in ("sim", "update", "rest")}}


def report(vec: dict[str, float], train: dict[str, Any], summary: dict[str, Any], cores: int,
           work: dict[str, Any] | None = None) -> list[str]:
    """The printed table (``work``: the one-thread-update pass of :func:`summarise`, shown when it is another)."""
    s = summary
    lines = [f"{'':28s} {'env-steps/s':>12s} {'CPU us/step':>12s} {'share of wall':>14s}",
             f"{'VecEnv alone (random acts)':28s} {vec['steps_per_s']:12,.0f} {vec['cpu_per_step_us']:12.1f}",
             f"{'training (' + str(train['num_envs']) + ' envs)':28s} {train['steps_per_s']:12,.0f} "
             f"{1e6 * train['cpu_s'] / train['steps']:12.1f}"]
    for part, label in (("sim", "  in env.step (simulator)"), ("update", "  in agent.update (learner)"),
                        ("rest", "  rest (act, store, log)")):
        lines.append(f"{label:28s} {'':12s} {train[part + '_cpu_per_step_us']:12.1f} {s['shares'][part]:14.0%}")
    if work is not None and work is not train:
        lines.append(f"{'training, update at 1 thread':28s} {work['steps_per_s']:12,.0f} "
                     f"{1e6 * work['cpu_s'] / work['steps']:12.1f}   (learner {work['update_cpu_per_step_us']:.1f} "
                     f"CPU us/step: the bound's)")
    lines += ["",
              f"training / VecEnv alone: {s['training_over_vecenv']:.2f}x (target >= {TARGET}x: "
              f"{'met' if s['met'] else 'NOT met'})"]
    if train.get("one_time_update_wall_s", 0.0) > 0.5:  # compile_update: the first update compiled
        lines.append(f"  without the first update's one-time {train['one_time_update_wall_s']:.1f} s (compilation): "
                     f"{train['steady_steps_per_s']:,.0f} env-steps/s = {s['steady_over_vecenv']:.2f}x "
                     f"({'met' if s['steady_met'] else 'NOT met'}; the steady state of a longer run)")
    lines += [
              f"bound on {cores} cores (all work perfectly packed): {s['bound_steps_per_s']:,.0f} env-steps/s = "
              f"{s['bound_over_vecenv']:.2f}x the VecEnv alone"
              + ("" if s["target_within_bound"] else f": the {TARGET}x target is above it on this machine")]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=400_000, help="training env steps per pass (default 400k)")
    p.add_argument("--vecenv-s", type=float, default=10.0,
                   help="seconds of each VecEnv-alone pass, before and after training (default 10)")
    p.add_argument("--out", type=Path, default=RESULTS / "agents" / "learner_overhead.json", help="rows file")
    p.add_argument("overrides", nargs="*", help="the training config's Hydra overrides (default: recipe=reach_fast)")
    args = p.parse_args()
    if args.steps < 1 or args.vecenv_s <= 0:
        p.error(f"--steps {args.steps} / --vecenv-s {args.vecenv_s}: both must be positive")
    torch.set_num_threads(1)
    overrides = args.overrides or ["recipe=reach_fast"]
    try:  # a bad override fails here, in one line, before any pass starts
        cfg = compose(overrides)
    except (HydraException, OmegaConfBaseException, InputError) as exc:
        p.error(f"overrides {overrides}: {str(exc).splitlines()[0]}")
    cores = os.cpu_count() or 1
    print(f"config: {' '.join(overrides)}; {cores} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    run_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"learner_overhead_{os.getpid()}"
    vec_before = in_fresh_process(vecenv_pass, cfg.task.name, cfg.task.num_envs, args.vecenv_s)
    train = in_fresh_process(training_pass, overrides, args.steps, run_dir / "as_configured")
    work = train
    if cfg.agent.update_threads > 1:  # the bound needs the learner's work, not OpenMP's spinning
        work = in_fresh_process(training_pass, [*overrides, "agent.update_threads=0"], args.steps,
                                run_dir / "update_1_thread")
    vec_after = in_fresh_process(vecenv_pass, cfg.task.name, cfg.task.num_envs, args.vecenv_s)
    vec = bracketed(vec_before, vec_after)
    print(f"VecEnv alone before / after training: {vec_before['steps_per_s']:,.0f} / {vec_after['steps_per_s']:,.0f} "
          f"env-steps/s (their mean is the ratios' denominator)")
    summary = summarise(vec, train, cores, work)
    print("\n".join(report(vec, train, summary, cores, work)))
    write_rows(args.out, {"vecenv": vec, "vecenv_before": vec_before, "vecenv_after": vec_after, "training": train,
                          "training_update_1_thread": work},
               overrides=overrides, summary=summary, cores=cores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
