"""Chunked critic vs one-step critic on the sparse so101_lift task: success rate vs env steps.

Both arms are the same agent (``agent=chunked_td3``) with the same budget and settings; only
``critic.chunk_len`` differs (``h`` vs 1; with 1 the agent is plain TD3 acting one step at a time).
Every ``--eval-every`` env steps the deterministic policy (the chunk's first action, re-planned every
step) runs ``--episodes`` fresh episodes; ``--eval-open-loop`` also scores the chunked arm playing whole
chunks open loop (as it collects, and as Q-chunking evaluates) and reports the ratio for that curve too. The
issue's target: the chunked arm reaches the one-step arm's final success in <= 0.5x the env steps.

``--demos <robot-rl record dataset>`` puts demonstrations in a separate replay partition of both arms,
sampled as chunks, ``--demo-fraction`` of every batch (the setting Q-chunking is evaluated in);
``--bc-weight`` adds a behaviour-cloning term on the demo chunks to the actor loss.

``--bc-init`` is the offline-to-online setting (Q-chunking's; the recipe of docs/results/demos.md): per seed,
each arm's actor and normaliser start from a BC clone of its own type trained on the same demos with the
same settings (``robot-rl bc``'s ``chunked`` actor of ``h`` actions for the chunked arm, ``deterministic`` for
the one-step arm), the critic trains alone for ``--critic-warmup`` updates, and ``--bc-anchor clone`` pulls
the actor towards its frozen clone on every state. The point at 0 env steps is then the clone itself.
Every run rewrites ``<out>/runs/h<h>_seed<s>.json`` after each evaluation (``"done": false``
until its budget is spent), so a stopped run still leaves its curve (``--merge`` reads these too). Runs go to
``--jobs`` parallel processes (one torch thread each), interleaved one-step / chunked per seed. Printed
per run: the curve, CPU seconds and wall seconds; at the end the load average, the final success per arm,
and the steps-to-match ratio (env steps at which the chunked arm first reaches the one-step arm's final
success / the one-step arm's total) per seed and of the seed-mean curves. ``--out`` (default
``docs/results/critics/chunked_vs_one_step``) gets ``curves.json`` (the runs as rows, with the command, commit,
load and machine) and ``chunked_vs_one_step.png``; ``--merge a/curves.json b/curves.json`` reports and plots
earlier runs together (e.g. one invocation per seed).

    robot-rl record --task so101_lift --episodes 30 --num-envs 8 --only-success --out /tmp/demos
    python benchmarks/chunked_vs_one_step.py --demos /tmp/demos --steps 30000 --seeds 0,1 --jobs 2
    python benchmarks/chunked_vs_one_step.py --demos /tmp/demos --bc-init --bc-anchor clone --bc-weight 10 \
        --critic-warmup 2000 --actor-lr 1e-4 --layer-norm --utd 1 --learning-starts 1000 --steps 12000 \
        --eval-every 2000 --episodes 64 --seeds 0,1,2 --jobs 2 --out /tmp/o2o

Without demos (the default) sparse lifting needs ~1e6+ steps (``--steps 2000000 --num-envs 64``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _results import RESULTS, write_rows

Curve = list[tuple[int, float]]


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def clone(demos: str, chunk_len: int, seed: int, hidden_dims: list[int]) -> tuple[str, float]:
    """``(dir, cpu_s)``: a BC clone of ``demos`` of the arm's actor type (``chunked`` of ``chunk_len`` actions, or
    ``deterministic`` for 1), ``robot-rl bc``'s settings otherwise, saved to a temporary directory."""
    from robot_rl.cli import main

    cpu0 = time.process_time()
    kind = ["--actor", "chunked", "--chunk-len", str(chunk_len)] if chunk_len > 1 else ["--actor", "deterministic"]
    out = tempfile.mkdtemp(prefix=f"bc_h{chunk_len}_s{seed}_")
    argv = ["bc", demos, "--out", out, "--hidden-dims", *map(str, hidden_dims), "--seed", str(seed), "--no-export"]
    if main([*argv, *kind]) != 0:
        raise SystemExit(f"robot-rl bc {demos} failed")
    return out, time.process_time() - cpu0


class OpenLoopPolicy:
    """Evaluation view of a chunked agent that plays every chunk open loop (Q-chunking's execution): raw policy
    obs ``[N, D]`` -> env actions ``[N, A]``. An env at the first step of an episode (``env.episode_step == 0``:
    reset by ``step`` or ``reset``) drops its plan."""

    def __init__(self, agent: object, env: object) -> None:
        from robot_rl.models.chunked_actor import ChunkExecutor

        self.agent, self.env = agent, env
        self.executor = ChunkExecutor(env.num_envs, agent.actor_len, env.action_dim, "open_loop", device=agent.device)

    def __call__(self, obs: object) -> object:
        self.executor.reset(self.env.episode_step == 0)
        x = self.agent.normalizers["policy"](obs)
        return self.agent.to_env_action(self.executor.act(x, self.agent.actor))


def run(task: str, chunk_len: int, steps: int, seed: int, num_envs: int, eval_every: int, episodes: int,
        agent_kw: dict, critic_kw: dict, bc_init: bool = False, run_file: str | None = None,
        open_loop: bool = False) -> dict:
    """Train one arm; returns ``{"curve": [(env_steps, success)], "cpu_s", "wall_s", "updates", "bc_cpu_s"}``.

    ``bc_init``: start from a clone of the arm's type (:func:`clone`) and evaluate it at 0 env steps.
    ``run_file``: rewritten after every evaluation with the result so far (``"done": false`` until the end).
    ``open_loop``: chunked arm also evaluated playing whole chunks open loop (``"curve_open_loop"``)."""
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
    bc_cpu = 0.0
    if bc_init:
        bc_dir, bc_cpu = clone(agent_kw["demos"], chunk_len, seed, list(agent_kw.get("actor_hidden_dims", [256, 256])))
        agent_kw = {**agent_kw, "bc_checkpoint": bc_dir, "normalize_obs": True}
    cfg = ChunkedTD3Config(buffer_size=max(steps, 10_000), **agent_kw)
    agent = make_agent(cfg, ChunkedCriticConfig(chunk_len=chunk_len, **critic_kw), EnvSpec.from_env(env))
    curve: Curve = []
    curve_open: Curve = []
    open_loop = open_loop and chunk_len > 1
    obs = env.reset(seed=seed)
    next_eval = 0 if bc_init else eval_every

    def result(done: bool) -> dict:
        return {"task": task, "steps": steps, "demos": agent_kw["demos"], "chunk_len": chunk_len, "seed": seed,
                "curve": curve, **({"curve_open_loop": curve_open} if open_loop else {}),
                "cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - wall0, "updates": agent.updates,
                "bc_cpu_s": bc_cpu, "done": done}

    while True:
        if agent.env_steps >= next_eval or agent.env_steps >= steps:
            success = evaluate(lambda o: agent.act({"policy": o}, deterministic=True), eval_env, episodes,
                               seed=seed + 1000).summary()["success_rate"]  # closed loop: each chunk's first action
            curve.append((agent.env_steps, success))
            note = ""
            if open_loop:
                ol = evaluate(OpenLoopPolicy(agent, eval_env), eval_env, episodes, seed=seed + 1000).summary()
                curve_open.append((agent.env_steps, ol["success_rate"]))
                note = f"  open loop {ol['success_rate']:.3f}"
            print(f"  seed {seed} h={chunk_len}: {agent.env_steps:>7d} steps  success {success:.3f}{note}  "
                  f"({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
            next_eval += eval_every
            if run_file:
                write_json(Path(run_file), result(agent.env_steps >= steps))
        if agent.env_steps >= steps:
            return result(True)
        action = agent.act(obs)
        step = env.step(action.clamp(env.action_low, env.action_high))
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()


def steps_to_reach(curve: Curve, level: float) -> float:
    """First env step count at which ``curve`` reaches ``level`` (nan if never)."""
    return next((float(s) for s, v in curve if v >= level), float("nan"))


def match_ratio(one: Curve, chunked: Curve) -> tuple[float, str]:
    """``(ratio, note)``: the env steps at which ``chunked`` first reaches ``one``'s final success, over ``one``'s
    total env steps (where that final success was measured).

    The ratio is nan when the one-step arm's final success is 0 (trivially matched, no evidence) or the
    chunked arm never reaches it (target missed)."""
    target = one[-1][1]
    if target <= 0:
        return float("nan"), "one-step final success is 0: trivially matched, undefined"
    reached = steps_to_reach(chunked, target)
    ratio = reached / one[-1][0]
    if ratio != ratio:
        return ratio, f"chunked never reaches {target:.3f}"
    return ratio, f"{ratio:.3f} (chunked reaches {target:.3f} at {reached:.0f} of {one[-1][0]} steps; target <= 0.5)"


def mean_curve(curves: list[Curve]) -> Curve:
    """Pointwise mean over seeds of curves evaluated at the same env steps (up to the shortest: a stopped run)."""
    return [(pts[0][0], statistics.fmean(v for _, v in pts)) for pts in zip(*curves, strict=False)]


def plot(curves: dict[str, dict[int, Curve]], path: Path, title: str) -> None:
    """Success vs env steps, one thin line per seed and a thick seed mean per arm (open-loop evaluation dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    styles = (("tab:blue", "-"), ("tab:orange", "-"), ("tab:orange", "--"))
    for (arm, per_seed), (color, ls) in zip(curves.items(), styles, strict=False):
        for c in per_seed.values():
            ax.plot(*zip(*c, strict=True), color=color, ls=ls, alpha=0.3, lw=1)
        ax.plot(*zip(*mean_curve(list(per_seed.values())), strict=True), color=color, ls=ls, lw=2.5,
                label=f"{arm} (mean)")
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
    p.add_argument("--bc-init", action="store_true",
                   help="start each arm from a BC clone of its own actor type (needs --demos; evaluated at step 0)")
    p.add_argument("--bc-anchor", default="demos", choices=["demos", "clone"],
                   help="what --bc-weight pulls towards: the demo actions, or the frozen clone (needs --bc-init)")
    p.add_argument("--critic-warmup", type=int, default=0, help="critic-only updates before the actor moves")
    p.add_argument("--actor-lr", type=float, default=1e-3, help="actor learning rate (agent.actor_lr)")
    p.add_argument("--utd", type=float, default=0.25, help="gradient updates per env step")
    p.add_argument("--learning-starts", type=int, default=5000, help="uniform-random env steps before updates")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--eval-open-loop", action="store_true",
                   help="also evaluate the chunked arm playing whole chunks open loop (Q-chunking's execution)")
    p.add_argument("--arms", default="one-step,chunked",
                   help="comma-separated arms to train: one-step, chunked (the report needs both, see --merge)")
    p.add_argument("--jobs", type=int, default=1, help="parallel processes (one torch thread each)")
    p.add_argument("--out", type=Path, default=RESULTS / "critics" / "chunked_vs_one_step",
                   help="folder for runs/, curves.json and chunked_vs_one_step.png (default: %(default)s)")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="curves.json files of earlier runs (e.g. one per seed), or the runs/h<h>_seed<s>.json files "
                        "of runs in progress or stopped: report and plot them together instead of training")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.bc_init and not args.demos:
        p.error("--bc-init clones the demos: pass --demos <robot-rl record dataset>")
    if args.bc_anchor == "clone" and not args.bc_init:
        p.error("--bc-anchor clone anchors to the arm's BC clone: add --bc-init")
    if args.merge:
        files = [json.loads(f.read_text()) for f in args.merge]
        runs = [r for f in files for r in (f["runs"] if "runs" in f else f["rows"] if "rows" in f else [f])]
        print(f"merged {len(runs)} runs of {[str(f) for f in args.merge]}")
        for f, path in zip(files, args.merge, strict=True):
            args.task, args.steps, args.demos = (f.get("settings", f)[k] for k in ("task", "steps", "demos"))
            if "load_average" in f:
                load = f["load_average"]
                print(f"  {path}: {f['wall_s']:.0f} s wall with {f['settings']['jobs']} job(s), load average "
                      f"{load[0]:.2f} at start, {load[1]:.2f} at end")
            elif not f.get("done", True):
                print(f"  {path}: stopped early at {f['curve'][-1][0]} env steps")
        report(runs, args)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    agent_kw = {"learning_starts": args.learning_starts, "batch_size": args.batch_size, "utd_ratio": args.utd,
                "demos": args.demos, "demo_fraction": args.demo_fraction, "bc_weight": args.bc_weight,
                "bc_anchor": args.bc_anchor, "critic_warmup_updates": args.critic_warmup, "actor_lr": args.actor_lr}
    critic_kw = {"layer_norm": args.layer_norm}
    print(f"settings: {vars(args)}\nagent: {agent_kw}\ncritic: {critic_kw}", flush=True)
    load0, wall0 = os.getloadavg(), time.monotonic()
    lens = {"one-step": 1, "chunked": args.chunk_len}
    if not set(args.arms.split(",")) <= set(lens):
        p.error(f"--arms {args.arms!r}: choose from {sorted(lens)}")
    jobs = [(lens[a], seed) for seed in seeds for a in ("one-step", "chunked") if a in args.arms.split(",")]
    (args.out / "runs").mkdir(parents=True, exist_ok=True)

    def run_file(h: int, seed: int) -> str:
        return str(args.out / "runs" / f"h{h}_seed{seed}.json")

    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {job: pool.submit(run, args.task, job[0], args.steps, job[1], args.num_envs, args.eval_every,
                                    args.episodes, agent_kw, critic_kw, args.bc_init, run_file(*job),
                                    args.eval_open_loop) for job in jobs}
        runs = [f.result() for f in futures.values()]
    load1, wall = os.getloadavg(), time.monotonic() - wall0
    if len({r["chunk_len"] for r in runs}) < 2:
        print(f"{wall:.0f} s wall; one arm only: merge its runs/*.json with the other arm's (--merge)")
        return
    print(f"{wall:.0f} s wall with {args.jobs} job(s); load average {load0[0]:.2f} at start, {load1[0]:.2f} at end")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_rows(args.out / "curves.json", runs, settings=settings, load_average=[load0[0], load1[0]], wall_s=wall)
    report(runs, args)


def report(runs: list[dict], args: argparse.Namespace) -> None:
    """Print the curves, CPU and the steps-to-match ratios of ``runs`` (one dict per arm and seed: ``chunk_len``,
    ``seed``, ``curve``, ``cpu_s``, ``wall_s``, ``updates``); plot them to ``args.out`` when given."""
    h = max(r["chunk_len"] for r in runs)
    arms = {1: "one-step (h = 1)", h: f"chunked (h = {h})"}
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["chunk_len"], r["seed"]): r for r in runs}
    curves = {arms[k]: {s: [tuple(p) for p in by[(k, s)]["curve"]] for s in seeds} for k in arms}
    one_name = arms[1]
    print(f"\n{args.task}, {args.steps} env steps x {len(seeds)} seed(s), demos: {args.demos}")
    print("  env steps             : " + " ".join(f"{s:>7d}" for s, _ in curves[one_name][seeds[0]]))
    for k, arm in arms.items():
        for seed in seeds:
            r = by[(k, seed)]
            print(f"  {arm:<17s} s{seed:<3d}: " + " ".join(f"{v:7.3f}" for _, v in r["curve"])
                  + f"   {r['cpu_s']:.0f} CPU-s, {r['wall_s']:.0f} s wall, {r['updates']} updates")
    open_name = f"chunked (h = {h}), open loop"
    if all("curve_open_loop" in by[(h, s)] for s in seeds):
        curves[open_name] = {s: [tuple(p) for p in by[(h, s)]["curve_open_loop"]] for s in seeds}
        for seed in seeds:
            print(f"  {'open loop':<17s} s{seed:<3d}: " + " ".join(f"{v:7.3f}" for _, v in curves[open_name][seed]))
    means = {arm: mean_curve(list(curves[arm].values())) for arm in curves}
    for name in curves:
        if name == one_name:
            continue
        label = "open-loop evaluation of the chunked arm" if name == open_name else "re-planned evaluation"
        print(f"steps-to-match ratio, {label}:")
        for seed in seeds:
            print(f"  seed {seed}: {match_ratio(curves[one_name][seed], curves[name][seed])[1]}")
        print(f"  seed-mean curves: {match_ratio(means[one_name], means[name])[1]}")
    print("final success (mean of seeds)  " + "  ".join(f"{name} {m[-1][1]:.3f}" for name, m in means.items()))
    cpu = {k: sum(by[(k, s)]["cpu_s"] for s in seeds) for k in arms}
    print(f"CPU-s all seeds: one-step {cpu[1]:.0f}, chunked {cpu[h]:.0f} (ratio {cpu[h] / cpu[1]:.2f})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        plot(curves, args.out / "chunked_vs_one_step.png",
             f"{args.task}{' + demos' if args.demos else ''}, {len(seeds)} seed(s)")
        print(f"wrote {args.out / 'chunked_vs_one_step.png'}")

if __name__ == "__main__":
    main()
