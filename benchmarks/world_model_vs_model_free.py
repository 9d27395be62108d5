"""World-model critic vs model-free critics on a locomotion task at equal env steps (sample efficiency).

Arms (same env, env steps, envs, warm-up, update-to-data ratio and batch size):

- ``tdmpc``: ``agent=tdmpc critic=world_model`` (TD-MPC2-style; acts with the policy prior while
  collecting unless ``--act-with plan``; ``--plan-eval`` also scores MPPI planning at the end;
  ``--value-head`` picks its reward/Q heads: ``scalar`` squared error or TD-MPC2's ``two_hot``),
- ``sac``: ``agent=sac critic=ensemble`` (two MLP Q critics, clipped double Q: standard SAC),
- ``td3``: ``agent=td3 critic=ensemble``.

Every ``--eval-every`` env steps the deterministic exported policy is evaluated on fresh episodes.
Runs are independent processes (one torch thread each, ``--jobs`` at a time); results go to
``--out`` as one JSON per run, then a table is printed from them and ``world_model_vs_model_free.png`` with
its rows, ``world_model_vs_model_free.json`` (one row per run, with the command, commit, load and machine),
written to ``--results`` (default ``docs/results/critics``); ``--report-only`` rebuilds those from existing
JSONs.

Usage (the budget in docs/results/critics.md: ~17 CPU-minutes, 57 min wall under load 15-24)::

    python benchmarks/world_model_vs_model_free.py --task half_cheetah --steps 20000 --seeds 0,1 \\
        --arms tdmpc,sac --jobs 4 --out outputs/wm_vs_mf
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from _results import RESULTS, write_rows

ARMS = ("tdmpc", "sac", "td3")


def make_arm(arm: str, env: object, args: argparse.Namespace) -> object:
    """The agent of ``arm`` with the shared budget settings."""
    from robot_rl.agents import EnvSpec, make_agent
    from robot_rl.critics.ensemble import EnsembleCriticConfig

    shared = {"learning_starts": args.learning_starts, "utd_ratio": args.utd, "batch_size": 256,
              "buffer_size": max(args.steps, 10_000), "checkpoint_buffer": False}
    spec = EnvSpec.from_env(env)
    if arm == "tdmpc":
        from robot_rl.agents.tdmpc import TDMPCConfig
        from robot_rl.critics.world_model import WorldModelCriticConfig

        critic = WorldModelCriticConfig(value_head=args.value_head or WorldModelCriticConfig.value_head,
                                        td_encoder=args.td_encoder)
        return make_agent(TDMPCConfig(act_with=args.act_with, **shared), critic, spec)
    if arm == "sac":
        from robot_rl.agents.sac import SACConfig

        return make_agent(SACConfig(**shared), EnsembleCriticConfig(), spec)
    from robot_rl.agents.td3 import TD3Config

    return make_agent(TD3Config(**shared), EnsembleCriticConfig(), spec)


def run(arm: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one arm with one seed; returns its curve, timings and (tdmpc) the final planning score."""
    import torch

    import sim
    from robot_rl.train.evaluation import evaluate

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    env = sim.make_env(args.task, num_envs=args.num_envs, seed=seed)
    eval_env = sim.make_env(args.task, num_envs=args.episodes, seed=seed + 1000)
    agent = make_arm(arm, env, args)
    cpu0, wall0 = time.process_time(), time.monotonic()
    curve: list[list[float]] = []
    obs = env.reset(seed=seed)
    next_eval = args.eval_every
    while agent.env_steps < args.steps:
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()
        if agent.env_steps >= next_eval or agent.env_steps >= args.steps:
            result = evaluate(agent.policy(), eval_env, args.episodes, seed=seed + 1000).summary()
            curve.append([agent.env_steps, result["return_mean"]])
            print(f"[{arm} seed {seed}] {agent.env_steps} steps: return {result['return_mean']:.1f} "
                  f"({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
            next_eval += args.eval_every
    out = {"arm": arm, "seed": seed, "curve": curve, "updates": agent.updates,
           "value_head": (args.value_head or "scalar") if arm == "tdmpc" else None,  # the world model's settings
           "td_encoder": args.td_encoder if arm == "tdmpc" else None,
           "cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - wall0, "load_avg": os.getloadavg()[0]}
    if arm == "tdmpc" and args.plan_eval:
        cpu1 = time.process_time()
        with torch.no_grad():
            out["plan_return"] = evaluate(agent.planning_policy(), eval_env, args.episodes,
                                          seed=seed + 1000).summary()["return_mean"]
        out["plan_eval_cpu_s"] = time.process_time() - cpu1
        print(f"[{arm} seed {seed}] MPPI planning: return {out['plan_return']:.1f}", flush=True)
    name = f"{arm}_{out['value_head']}{'_online' if out['td_encoder'] == 'online' else ''}" if arm == "tdmpc" else arm
    Path(args.out, f"{name}_seed{seed}.json").write_text(json.dumps(out, indent=1))
    return out


def label(run: dict) -> str:
    """The curve a run belongs to: its arm, and for tdmpc its reward/Q heads (JSONs written before the
    ``value_head`` option had scalar heads; those before ``td_encoder`` the target encoder)."""
    if run["arm"] != "tdmpc":
        return run["arm"]
    online = ", online encoder" if run.get("td_encoder") == "online" else ""
    return f"{run['arm']} ({run.get('value_head') or 'scalar'}{online})"


def mean_curves(runs: list[dict]) -> tuple[list[float], dict[str, list[float]]]:
    """The evaluation steps (of the first run) and, per :func:`label`, the seed-mean return at each of them
    (labels in ``ARMS`` order). Every run must have been evaluated at the same steps."""
    labels = sorted({label(r) for r in runs}, key=lambda x: (ARMS.index(x.split()[0]), x))
    steps = [s for s, _ in runs[0]["curve"]]
    means = {}
    for name in labels:
        mine = [r for r in runs if label(r) == name]
        means[name] = [statistics.fmean(r["curve"][k][1] for r in mine) for k in range(len(steps))]
    return steps, means


def report(args: argparse.Namespace) -> None:
    """Print the markdown table, write the plot and the rows to ``--results`` from the JSONs in ``--out`` (every
    curve found there: put two runs' JSONs in one folder and use ``--report-only`` to compare them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text()) for p in sorted(Path(args.out).glob("*_seed*.json"))]
    if not runs:
        raise SystemExit(f"no results in {args.out}: run the benchmark first (without --report-only)")
    steps, mean_curve = mean_curves(runs)
    labels = list(mean_curve)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, name in enumerate(labels):
        mine = [r for r in runs if label(r) == name]
        for r in mine:
            ax.plot(steps, [v for _, v in r["curve"]], alpha=0.3, color=f"C{i}")
        ax.plot(steps, mean_curve[name], label=f"{name} (mean of {len(mine)})", color=f"C{i}", lw=2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{args.task}: world-model vs model-free critics")
    ax.legend()
    fig.tight_layout()
    Path(args.results).mkdir(parents=True, exist_ok=True)
    fig.savefig(Path(args.results, "world_model_vs_model_free.png"), dpi=100)
    write_rows(Path(args.results, "world_model_vs_model_free.json"), [{"label": label(r), **r} for r in runs],
               settings={k: str(v) for k, v in vars(args).items()}, steps=steps, mean_curves=mean_curve)
    print("| env steps | " + " | ".join(str(int(s)) for s in steps) + " |")
    print("| --- " * (len(steps) + 1) + "|")
    for name in labels:
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in mean_curve[name]) + " |")
    print()
    for name in labels:
        mine = [r for r in runs if label(r) == name]
        finals = ", ".join(f"{r['curve'][-1][1]:.1f}" for r in mine)
        cpu, wall = statistics.fmean(r["cpu_s"] for r in mine), statistics.fmean(r["wall_s"] for r in mine)
        line = (f"{name}: final return per seed {finals}; updates {mine[0]['updates']}; CPU s per run {cpu:.0f}; "
                f"wall s {wall:.0f}; load average at the end {statistics.fmean(r['load_avg'] for r in mine):.1f}")
        if "plan_return" in mine[0]:
            line += "; MPPI planning final return per seed " + ", ".join(f"{r['plan_return']:.1f}" for r in mine)
        print(line)
    for i, a_name in enumerate(labels):
        for b_name in labels[i + 1:]:
            a, b = mean_curve[a_name][-1], mean_curve[b_name][-1]
            ratio = f"{a / b:.2f}" if b else "undefined"
            print(f"final return {a_name} {a:.1f} vs {b_name} {b:.1f}: difference {a - b:+.1f}, ratio {ratio}")


def main() -> None:
    """Run every (arm, seed) in a process pool, then report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run (all envs)")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--learning-starts", type=int, default=2000)
    p.add_argument("--utd", type=float, default=0.25, help="gradient updates per collected transition")
    p.add_argument("--arms", default="tdmpc,sac", help=f"comma-separated subset of {ARMS}")
    p.add_argument("--act-with", default="policy", choices=("policy", "plan"), help="tdmpc's acting while training")
    p.add_argument("--plan-eval", action="store_true", help="tdmpc: also evaluate MPPI planning at the end")
    p.add_argument("--value-head", choices=("scalar", "two_hot"), default=None,
                   help="tdmpc: reward/Q heads (default: critic=world_model's default)")
    p.add_argument("--td-encoder", choices=("target", "online"), default="target",
                   help="tdmpc: critic.td_encoder, the encoder of o' in TD targets (online = TD-MPC2)")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--eval-every", type=int, default=4000)
    p.add_argument("--episodes", type=int, default=4, help="evaluation episodes (one per eval env)")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--out", default="outputs/wm_vs_mf", help="folder of the per-run JSONs (default: %(default)s)")
    p.add_argument("--results", default=str(RESULTS / "critics"),
                   help="folder for the plot and the rows (default: %(default)s)")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    arms = args.arms.split(",")
    if bad := [a for a in arms if a not in ARMS]:
        raise SystemExit(f"--arms: unknown {bad}; choose from {ARMS}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        os.environ["OMP_NUM_THREADS"] = "1"
        jobs = [(a, int(s)) for s in args.seeds.split(",") for a in arms]
        start = time.monotonic()
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            for f in [pool.submit(run, a, s, args) for a, s in jobs]:
                f.result()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"\n{len(jobs)} runs in {time.monotonic() - start:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} "
              f"CPU-s (children), load average now {os.getloadavg()[0]:.1f}")
    report(args)


if __name__ == "__main__":
    main()
