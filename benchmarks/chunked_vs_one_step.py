"""Chunked critic vs one-step critic on the sparse so101_lift task: success rate vs env steps.

Both arms are the same agent (``agent=chunked_td3``) with the same budget and settings; only
``critic.chunk_len`` differs (``h`` vs 1; with 1 the agent is plain TD3 acting one step at a time).
Every ``--eval-every`` env steps the deterministic policy (the chunk's first action, re-planned every
step) runs ``--episodes`` fresh episodes. The issue's target: the chunked arm reaches the one-step arm's
final success in <= 0.5x the env steps.

``--demos <robot-rl record dataset>`` puts demonstrations in a separate replay partition of both arms,
sampled as chunks, ``--demo-fraction`` of every batch (the setting Q-chunking is evaluated in);
``--bc-weight`` adds a behaviour-cloning term on the demo chunks to the actor loss. Runs go to
``--jobs`` parallel processes (one torch thread each), interleaved one-step / chunked per seed. Printed
per run: the curve, CPU seconds and wall seconds; at the end the load average, the final success per arm,
and the steps-to-match ratio per seed and of the seed-mean curves. ``--out`` writes ``curves.json`` and
``chunked_vs_one_step.png``; ``--merge a/curves.json b/curves.json`` reports and plots earlier runs together
(e.g. one invocation per seed).

    robot-rl record --task so101_lift --episodes 30 --num-envs 8 --only-success --out /tmp/demos
    python benchmarks/chunked_vs_one_step.py --demos /tmp/demos --steps 30000 --seeds 0,1 --jobs 2

Without demos (the default) sparse lifting needs ~1e6+ steps (``--steps 2000000 --num-envs 64``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

Curve = list[tuple[int, float]]


def run(task: str, chunk_len: int, steps: int, seed: int, num_envs: int, eval_every: int, episodes: int,
        agent_kw: dict, critic_kw: dict) -> dict:
    """Train one arm; returns ``{"curve": [(env_steps, success)], "cpu_s", "wall_s", "updates"}``."""
    import torch

    torch.set_num_threads(1)
    import sim
    from robot_rl.agents import EnvSpec, make_agent
    from robot_rl.agents.chunked_td3 import ChunkedTD3Config
    from robot_rl.critics.chunked import ChunkedCriticConfig
    from robot_rl.train.evaluation import evaluate

    cpu0, wall0 = time.process_time(), time.monotonic()
    torch.manual_seed(seed)
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    eval_env = sim.make_env(task, num_envs=min(episodes, 16), seed=seed + 1000)
    cfg = ChunkedTD3Config(buffer_size=max(steps, 10_000), **agent_kw)
    agent = make_agent(cfg, ChunkedCriticConfig(chunk_len=chunk_len, **critic_kw), EnvSpec.from_env(env))
    curve: Curve = []
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
            print(f"  seed {seed} h={chunk_len}: {agent.env_steps:>7d} steps  success {result['success_rate']:.3f}  "
                  f"({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
            next_eval += eval_every
    return {"curve": curve, "cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - wall0,
            "updates": agent.updates}


def steps_to_reach(curve: Curve, level: float) -> float:
    """First env step count at which ``curve`` reaches ``level`` (nan if never)."""
    return next((float(s) for s, v in curve if v >= level), float("nan"))


def match_ratio(one: Curve, chunked: Curve) -> tuple[float, str]:
    """``(ratio, note)``: env steps for ``chunked`` to reach ``one``'s final success over ``one``'s own steps.

    The ratio is nan when the one-step arm's final success is 0 (trivially matched, no evidence) or the
    chunked arm never reaches it (target missed)."""
    target = one[-1][1]
    if target <= 0:
        return float("nan"), "one-step final success is 0: trivially matched, undefined"
    ratio = steps_to_reach(chunked, target) / steps_to_reach(one, target)
    return ratio, ("chunked never reaches it" if ratio != ratio else f"{ratio:.3f} (target <= 0.5)")


def mean_curve(curves: list[Curve]) -> Curve:
    """Pointwise mean over seeds of curves evaluated at the same env steps."""
    return [(pts[0][0], statistics.fmean(v for _, v in pts)) for pts in zip(*curves, strict=True)]


def plot(curves: dict[str, dict[int, Curve]], path: Path, title: str) -> None:
    """Success vs env steps, one thin line per seed and a thick seed mean per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (arm, per_seed), color in zip(curves.items(), ("tab:blue", "tab:orange"), strict=True):
        for c in per_seed.values():
            ax.plot(*zip(*c, strict=True), color=color, alpha=0.3, lw=1)
        ax.plot(*zip(*mean_curve(list(per_seed.values())), strict=True), color=color, lw=2.5, label=f"{arm} (mean)")
    ax.set(xlabel="env steps", ylabel="deterministic success", title=title, ylim=(-0.02, 1.02))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run both arms per seed and print curves, CPU/wall/load and the steps-to-match ratio."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="so101_lift")
    p.add_argument("--steps", type=int, default=60_000, help="env steps per arm and seed")
    p.add_argument("--chunk-len", type=int, default=5, help="h of the chunked arm (the other arm uses 1)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--episodes", type=int, default=32, help="evaluation episodes per point")
    p.add_argument("--demos", default=None, help="robot-rl record dataset for a demo partition (both arms)")
    p.add_argument("--demo-fraction", type=float, default=0.5, help="share of every batch from the demos")
    p.add_argument("--bc-weight", type=float, default=0.0, help="BC term on the demo chunks (needs --demos)")
    p.add_argument("--layer-norm", action="store_true", help="LayerNorm critics (critic.layer_norm=true)")
    p.add_argument("--utd", type=float, default=0.25, help="gradient updates per env step")
    p.add_argument("--learning-starts", type=int, default=5000, help="uniform-random env steps before updates")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--jobs", type=int, default=1, help="parallel processes (one torch thread each)")
    p.add_argument("--out", type=Path, default=None, help="folder for curves.json and chunked_vs_one_step.png")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="curves.json files of earlier runs (e.g. one per seed): report and plot them together "
                        "instead of training")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.merge:
        files = [json.loads(f.read_text()) for f in args.merge]
        runs = [r for f in files for r in f["runs"]]
        args.task, args.steps, args.demos = (files[0]["settings"][k] for k in ("task", "steps", "demos"))
        print(f"merged {len(runs)} runs of {[str(f) for f in args.merge]}")
        for f, path in zip(files, args.merge, strict=True):
            load = f["load_average"]
            print(f"  {path}: {f['wall_s']:.0f} s wall with {f['settings']['jobs']} job(s), load average "
                  f"{load[0]:.2f} at start, {load[1]:.2f} at end")
        report(runs, args)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    agent_kw = {"learning_starts": args.learning_starts, "batch_size": args.batch_size, "utd_ratio": args.utd,
                "demos": args.demos, "demo_fraction": args.demo_fraction, "bc_weight": args.bc_weight}
    critic_kw = {"layer_norm": args.layer_norm}
    print(f"settings: {vars(args)}\nagent: {agent_kw}\ncritic: {critic_kw}", flush=True)
    load0, wall0 = os.getloadavg(), time.monotonic()
    jobs = [(h, seed) for seed in seeds for h in (1, args.chunk_len)]  # one-step and chunked of a seed together
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {job: pool.submit(run, args.task, job[0], args.steps, job[1], args.num_envs,
                                    args.eval_every, args.episodes, agent_kw, critic_kw) for job in jobs}
        runs = [{"chunk_len": h, "seed": seed, **f.result()} for (h, seed), f in futures.items()]
    load1, wall = os.getloadavg(), time.monotonic() - wall0
    print(f"{wall:.0f} s wall with {args.jobs} job(s); load average {load0[0]:.2f} at start, {load1[0]:.2f} at end")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        (args.out / "curves.json").write_text(json.dumps(
            {"settings": settings, "runs": runs, "load_average": [load0[0], load1[0]], "wall_s": wall}, indent=1))
    report(runs, args)


def report(runs: list[dict], args: argparse.Namespace) -> None:
    """Print the curves, CPU and the steps-to-match ratios of ``runs`` (one dict per arm and seed: ``chunk_len``,
    ``seed``, ``curve``, ``cpu_s``, ``wall_s``, ``updates``); plot them to ``args.out`` when given."""
    h = max(r["chunk_len"] for r in runs)
    arms = {1: "one-step (h = 1)", h: f"chunked (h = {h})"}
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["chunk_len"], r["seed"]): r for r in runs}
    curves = {arms[k]: {s: [tuple(p) for p in by[(k, s)]["curve"]] for s in seeds} for k in arms}
    one_name, chunk_name = arms.values()
    print(f"\n{args.task}, {args.steps} env steps x {len(seeds)} seed(s), demos: {args.demos}")
    print("  env steps             : " + " ".join(f"{s:>7d}" for s, _ in curves[one_name][seeds[0]]))
    for k, arm in arms.items():
        for seed in seeds:
            r = by[(k, seed)]
            print(f"  {arm:<17s} s{seed:<3d}: " + " ".join(f"{v:7.3f}" for _, v in r["curve"])
                  + f"   {r['cpu_s']:.0f} CPU-s, {r['wall_s']:.0f} s wall, {r['updates']} updates")
    for seed in seeds:
        print(f"  seed {seed}: steps-to-match ratio {match_ratio(curves[one_name][seed], curves[chunk_name][seed])[1]}")
    means = {arm: mean_curve(list(curves[arm].values())) for arm in curves}
    print(f"final success (mean of seeds)  one-step {means[one_name][-1][1]:.3f}  "
          f"chunked {means[chunk_name][-1][1]:.3f}")
    print(f"steps-to-match ratio of the seed-mean curves: {match_ratio(means[one_name], means[chunk_name])[1]}")
    cpu = {k: sum(by[(k, s)]["cpu_s"] for s in seeds) for k in arms}
    print(f"CPU-s all seeds: one-step {cpu[1]:.0f}, chunked {cpu[h]:.0f} (ratio {cpu[h] / cpu[1]:.2f})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        plot(curves, args.out / "chunked_vs_one_step.png",
             f"{args.task}{' + demos' if args.demos else ''}, {len(seeds)} seed(s)")
        print(f"wrote {args.out / 'chunked_vs_one_step.png'}")

if __name__ == "__main__":
    main()
