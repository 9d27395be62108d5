"""Demo-augmented RL (RLPD) vs pure RL (SAC) on the sparse so101_lift task: success rate vs env steps.

Once: record ``--demos-episodes`` scripted-expert episodes (``robot-rl record``'s expert) unless the
dataset exists, and clone them (``robot-rl bc``'s gaussian actor) as a BC-only reference. Then, per
seed, two arms with the same networks, settings and env-step budget:

- ``sac``: SAC with a LayerNorm Q ensemble (``critic=ensemble_ln``), the critic reading the policy observation;
- ``rlpd``: the same agent whose every batch is half demo transitions (``agent=rlpd``);
- ``rlpd_bc`` (``--arms``): ``rlpd`` whose actor starts from the BC clone and keeps a BC penalty on the
  demo rows (``agent.bc_weight``).

Every ``--eval-every`` env steps the deterministic policy runs ``--episodes`` fresh episodes. Printed: the
curves, final and best success per arm, env steps to reach 50% / 80%, and the issue's ratio per seed (the
first env steps at which the demo arm reaches the SAC arm's best success / the SAC arm's own). Curves go to
``--out`` (default ``docs/results/demos/demos_vs_rl``: ``curves.json``, one row per run with the BC
references, the command, commit, load and machine; ``demos_vs_rl.png``); each run also rewrites
``runs/<arm>_seed<s>.json`` after every evaluation, so a run stopped early leaves its curve (tabulate with
``--seeds "" --merge``). Seeds run as parallel processes (``--workers``), one torch thread each.

    python benchmarks/demos_vs_rl.py --steps 16000 --seeds 0,1 --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _results import RESULTS, write_rows

ARMS = ("sac", "rlpd", "rlpd_bc")
COLORS = {"sac": "tab:blue", "rlpd": "tab:orange", "rlpd_bc": "tab:green"}
Curve = list[tuple[int, float]]  # [(env_steps, success rate)]


def record_demos(task: str, root: Path, episodes: int) -> None:
    """Record ``episodes`` successful scripted-expert episodes of ``task`` to ``root``."""
    from robot_rl.demos.recorder import expert_policy, record

    summary = record(task, expert_policy, root, episodes, task.replace("_", " "), num_envs=8,
                     only_success=True, source=f"expert:{task}")
    print(summary, flush=True)


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def run_arm(arm: str, task: str, demos: str, steps: int, seed: int, num_envs: int, eval_every: int,
            episodes: int, common: dict, bc_extra: dict, run_file: str | None = None) -> dict:
    """Train one arm; returns its curve ``[(env_steps, success)]``, critic/actor probes and CPU/wall seconds.

    ``common``: agent settings of every arm; ``bc_extra``: the ``rlpd_bc`` arm's own (bc_weight, warm-up...).
    At every evaluation (and before training) the probes measure, on the demo partition's states, the critic's
    mean Q of the demo actions and the deterministic actor's mean squared distance to them (per action dim).
    The probes also count the training episodes so far and those that ended in success (``train_successes``:
    how often the arm's own exploration met the sparse reward).
    ``run_file``: after every evaluation the result so far (``"done": false`` until the budget is spent) is
    written there, so a run stopped early still leaves its curve (``--merge`` reads such files).
    """
    import torch

    torch.set_num_threads(1)
    import sim
    from robot_rl.agents import EnvSpec, make_agent
    from robot_rl.agents.rlpd import RLPDConfig
    from robot_rl.agents.sac import SACConfig
    from robot_rl.critics.layer_norm import LayerNormEnsembleCriticConfig
    from robot_rl.data.demo_buffer import demo_replay
    from robot_rl.train.evaluation import evaluate

    torch.manual_seed(seed)
    env = sim.make_env(task, num_envs=num_envs, seed=seed)
    eval_env = sim.make_env(task, num_envs=min(episodes, 16), seed=seed + 1000)
    spec = EnvSpec.from_env(env)
    common = {"buffer_size": max(steps, 10_000), **common}
    if arm == "rlpd":
        cfg = RLPDConfig(demos=demos, critic_obs="policy", **common)
    elif arm == "rlpd_bc":  # actor + normaliser from a gaussian BC clone of the demos, kept near them by bc_weight
        bc_dir = clone(demos, task, seed, tempfile.mkdtemp(prefix="bc_"))
        cfg = RLPDConfig(demos=demos, critic_obs="policy", bc_checkpoint=str(bc_dir), normalize_obs=True,
                         **{**common, **bc_extra})
    else:  # the same critic input as rlpd: the policy observation (demos record no critic group)
        cfg = SACConfig(**common)
        spec = dataclasses.replace(spec, observation_dims={"policy": spec.observation_dims["policy"]})
    agent = make_agent(cfg, LayerNormEnsembleCriticConfig(), spec)
    probe = demo_replay(demos, {"policy": spec.observation_dims["policy"]}, spec.action_dim)
    probe_obs, probe_action = probe.obs["policy"][:, 0], agent.from_env_action(probe.action[:, 0])  # into [-1, 1]
    curve: Curve = []
    probes: list[dict[str, float]] = []
    obs = env.reset(seed=seed)
    wall, cpu = time.monotonic(), time.process_time()
    next_eval, train_episodes, train_successes = 0, 0, 0
    while True:
        if agent.env_steps >= next_eval or agent.env_steps >= steps:
            result = evaluate(agent.policy(), eval_env, episodes, seed=seed + 1000).summary()
            with torch.no_grad():
                norm_obs = agent.normalizers["policy"](probe_obs)
                q_demo = float(agent.critic(norm_obs, probe_action).mean())
                actor_mse = float((agent.actor(norm_obs) - probe_action).pow(2).mean())
            curve.append((agent.env_steps, result["success_rate"]))
            probes.append({"env_steps": agent.env_steps, "updates": agent.updates, "q_demo": q_demo,
                           "actor_mse": actor_mse, "train_episodes": train_episodes,
                           "train_successes": train_successes})
            print(f"  {arm} seed {seed}: {agent.env_steps:>7d} steps {agent.updates:>6d} updates  success "
                  f"{result['success_rate']:.3f}  Q(demo) {q_demo:+.3f}  actor-demo MSE {actor_mse:.4f}  "
                  f"train successes {train_successes}/{train_episodes}  "
                  f"({time.monotonic() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU)", flush=True)
            next_eval += eval_every
            if run_file:
                write_json(Path(run_file), {"arm": arm, "seed": seed, "curve": curve, "probes": probes,
                                            "wall_s": time.monotonic() - wall, "cpu_s": time.process_time() - cpu,
                                            "done": agent.env_steps >= steps})
        if agent.env_steps >= steps:
            break
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
        train_episodes += int(step.done.sum())
        train_successes += int((step.done & step.info["success"]).sum())
        if agent.ready():
            agent.update()
    return {"arm": arm, "seed": seed, "curve": curve, "probes": probes, "wall_s": time.monotonic() - wall,
            "cpu_s": time.process_time() - cpu, "done": True}


def clone(demos: str, task: str, seed: int, out: str) -> Path:
    """``robot-rl bc``'s gaussian clone of ``demos`` (its defaults, ``--seed seed``) written to ``out``."""
    from robot_rl.cli import main

    if main(["bc", demos, "--out", out, "--task", task, "--seed", str(seed), "--no-export"]) != 0:
        raise SystemExit(f"robot-rl bc {demos} failed")
    return Path(out)


def bc_reference(demos: str, task: str, episodes: int, seed: int) -> dict:
    """Success of the BC-only gaussian actor cloned from ``demos``."""
    import torch

    torch.set_num_threads(1)
    import sim
    from robot_rl.train.evaluation import evaluate
    from robot_rl.train.run_loading import open_run

    start = time.process_time()
    out = clone(demos, task, seed, tempfile.mkdtemp(prefix="bc_"))
    agent = open_run(out).agent
    env = sim.make_env(task, num_envs=min(episodes, 16), seed=seed + 1000)
    summary = evaluate(agent.policy(), env, episodes, seed=seed + 1000).summary()
    return {"seed": seed, "success": summary["success_rate"],
            "val_mse": json.loads((out / "bc.json").read_text())["best"]["val/mse"],
            "cpu_s": time.process_time() - start}


def steps_to_reach(curve: Curve, level: float) -> float:
    """First evaluated env-step count whose success is ``>= level`` (nan if never)."""
    return next((float(s) for s, v in curve if v >= level), float("nan"))


def mean_curve(curves: list[Curve]) -> Curve:
    """Mean success over seeds at the env-step counts every curve evaluated (a run cut short ends it early)."""
    common = set.intersection(*({s for s, _ in c} for c in curves))
    return [(s, statistics.fmean(dict(c)[s] for c in curves)) for s in sorted(common)]


def plot(results: list[dict], bc: list[dict], path: Path, title: str, xscale: str = "linear") -> None:
    """Success vs env steps, one thin line per seed and a thick mean per arm, BC-only as a dashed line.

    ``xscale="symlog"``: linear up to 2,000 env steps, logarithmic beyond (arms run for 10k and 100k+ steps).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm in [a for a in ARMS if any(r["arm"] == a for r in results)]:
        color = COLORS[arm]
        curves = [r["curve"] for r in results if r["arm"] == arm]
        for c in curves:
            ax.plot([s for s, _ in c], [v for _, v in c], color=color, alpha=0.3, lw=1)
        mean = mean_curve(curves)
        ax.plot([s for s, _ in mean], [v for _, v in mean], color=color, lw=2.5,
                label=f"{arm} (mean of {len(curves)} seeds)")
    if bc:
        ax.axhline(statistics.fmean(b["success"] for b in bc), color="gray", ls="--", label="BC only (mean)")
    ax.set(xlabel="env steps", ylabel="eval success rate", ylim=(-0.02, 1.02), title=title)
    if xscale == "symlog":
        ax.set_xscale("symlog", linthresh=2000)
        ax.set_xlim(left=0)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_merged(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """Results and BC references of ``--merge`` files: a ``curves.json`` or one run's ``runs/<arm>_seed<s>.json``."""
    results: list[dict] = []
    bc: list[dict] = []
    for path in paths:
        saved = json.loads(path.read_text())
        if "arm" in saved:
            results.append(saved)
        elif "rows" in saved or "results" in saved:  # written by write_rows / before it
            results += saved.get("rows", saved.get("results"))
            bc += saved["bc"]
        else:
            raise SystemExit(f"--merge {path}: neither a curves.json (results, bc) nor a run file (arm, curve)")
    return results, bc


def report(results: list[dict], bc: list[dict]) -> None:
    """Print every curve, final and best success per arm, and the issue's env-step ratio per seed.

    The ratio: pure RL's (``sac``) best evaluated success and the first env-step count it reached it at;
    the first env-step count at which the demo arm reached the same success; demo steps / sac steps.
    """
    for arm in [a for a in ARMS if any(r["arm"] == a for r in results)]:
        arm_results = [r for r in results if r["arm"] == arm]
        for r in arm_results:
            cut = "" if r.get("done", True) else f" (stopped early, {r['cpu_s']:.0f} s CPU)"
            print(f"{arm} seed {r['seed']}{cut}: " + " ".join(f"{s}:{v:.3f}" for s, v in r["curve"]))
        finals = [r["curve"][-1][1] for r in arm_results]
        best = [max(v for _, v in r["curve"]) for r in arm_results]
        reach = {lvl: [steps_to_reach(r["curve"], lvl) for r in arm_results] for lvl in (0.5, 0.8)}
        evals = sum(len(r["curve"]) for r in arm_results)
        print(f"{arm}: final success mean {statistics.fmean(finals):.3f} {finals} (at env steps "
              f"{[r['curve'][-1][0] for r in arm_results]}); best {best} over {evals} evaluations; env steps to "
              f"50%: {reach[0.5]}, to 80%: {reach[0.8]}; CPU {sum(r['cpu_s'] for r in arm_results):.0f} s")
        if bc:
            bc_mean = statistics.fmean(b["success"] for b in bc)
            print(f"{arm} final success / BC only's: {statistics.fmean(finals):.3f} / {bc_mean:.3f} = "
                  f"{statistics.fmean(finals) / bc_mean if bc_mean else float('nan'):.2f}x")
    if bc:
        print("BC only (gaussian actor): " + ", ".join(f"seed {b['seed']} {b['success']:.3f}" for b in bc))
    for arm in [a for a in ARMS if a != "sac" and any(r["arm"] == a for r in results)]:
        for seed in sorted({r["seed"] for r in results}):
            sac = next((r["curve"] for r in results if r["arm"] == "sac" and r["seed"] == seed), None)
            demo = next((r["curve"] for r in results if r["arm"] == arm and r["seed"] == seed), None)
            if sac is None or demo is None:
                continue
            best = max(v for _, v in sac)
            if best == 0:
                print(f"seed {seed}: sac's success is 0 at every evaluation up to {sac[-1][0]} env steps: "
                      f"the <= 0.5x target is met only trivially ({arm} final {demo[-1][1]:.3f} at {demo[-1][0]})")
                continue
            sac_at, demo_at = steps_to_reach(sac, best), steps_to_reach(demo, best)
            print(f"seed {seed}: sac's best success {best:.3f} first at {sac_at:.0f} env steps; {arm} reaches it at "
                  f"{demo_at:.0f}: ratio {demo_at / sac_at:.3f} (target <= 0.5)")


def main() -> None:
    """Record/clone once, run every (arm, seed), print the table and ratios, write the plot."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="so101_lift")
    p.add_argument("--demos", default=None, help="dataset dir (default outputs/demos/<task>_<N>; recorded if absent)")
    p.add_argument("--demos-episodes", type=int, default=30, help="expert episodes to record (default 30)")
    p.add_argument("--steps", type=int, default=16_000, help="env steps per arm and seed")
    p.add_argument("--seeds", default="0,1", help='comma-separated; "" with --merge only tabulates and plots')
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--utd", type=float, default=1.0, help="gradient updates per env step (both arms)")
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--init-alpha", type=float, default=0.05, help="SAC's initial temperature (both arms)")
    p.add_argument("--eval-every", type=int, default=2000)
    p.add_argument("--episodes", type=int, default=32, help="eval episodes per point")
    p.add_argument("--workers", type=int, default=1, help="parallel processes (one torch thread each)")
    p.add_argument("--arms", default="sac,rlpd", help=f"comma-separated, of {ARMS} (rlpd_bc: BC-initialised actor)")
    p.add_argument("--n-step", type=int, default=1, help="n-step returns (every arm)")
    p.add_argument("--backup-entropy", action=argparse.BooleanOptionalAction, default=True,
                   help="every arm: agent.backup_entropy (--no-backup-entropy: no -alpha*log pi in the TD target)")
    p.add_argument("--bc-weight", type=float, default=1.0, help="rlpd_bc: agent.bc_weight (BC penalty on demo rows)")
    p.add_argument("--critic-warmup", type=int, default=0,
                   help="rlpd_bc: agent.critic_warmup_updates (first N updates train the critic only)")
    p.add_argument("--bc-decay", type=int, default=0, help="rlpd_bc: agent.bc_decay_updates (0 = constant bc_weight)")
    p.add_argument("--bc-actor-lr", type=float, default=3e-4, help="rlpd_bc: agent.actor_lr")
    p.add_argument("--bc-anchor", choices=("demos", "clone"), default="demos",
                   help="rlpd_bc: agent.bc_anchor (demos: demo actions, demo rows; clone: frozen clone, all rows)")
    p.add_argument("--skip", default="", help='merged runs to leave out, "ARM:SEED,..." (e.g. a shorter earlier '
                   'run of an arm whose other seeds ran longer: "sac:2")')
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="curves.json or runs/<arm>_seed<s>.json of earlier runs (other arms/seeds) to tabulate and "
                        "plot with this one; an (arm, seed) is taken from this run, else from the first file giving it")
    p.add_argument("--xscale", choices=("linear", "symlog"), default="linear",
                   help="plot's env-step axis (symlog: linear to 2,000, then log; for arms of very different budgets)")
    p.add_argument("--out", type=Path, default=RESULTS / "demos" / "demos_vs_rl",
                   help="folder for runs/, curves.json and demos_vs_rl.png (default: %(default)s)")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else []
    if not seeds and not args.merge:
        p.error("--seeds is empty: give seeds to run, or --merge earlier curves.json files to tabulate")
    demos = Path(args.demos or f"outputs/demos/{args.task}_{args.demos_episodes}")
    if seeds and not (demos / "meta" / "info.json").is_file():
        record_demos(args.task, demos, args.demos_episodes)
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    start, load0 = time.monotonic(), os.getloadavg()
    arms = args.arms.split(",")
    if unknown := sorted(set(arms) - set(ARMS)):
        p.error(f"--arms {unknown} unknown; choose from {ARMS}")
    jobs = [(arm, seed) for seed in seeds for arm in arms]
    common = {"learning_starts": args.learning_starts, "utd_ratio": args.utd, "init_alpha": args.init_alpha,
              "n_step": args.n_step, "backup_entropy": args.backup_entropy}
    bc_extra = {"bc_weight": args.bc_weight, "critic_warmup_updates": args.critic_warmup,
                "bc_decay_updates": args.bc_decay, "actor_lr": args.bc_actor_lr,
                "bc_anchor": args.bc_anchor}
    if seeds:
        print(f"every arm: {common}; rlpd_bc also: {bc_extra}", flush=True)
    with ProcessPoolExecutor(args.workers) as pool:
        bc_futures = [pool.submit(bc_reference, str(demos), args.task, args.episodes, s) for s in seeds]
        futures = [pool.submit(run_arm, arm, args.task, str(demos), args.steps, seed, args.num_envs,
                               args.eval_every, args.episodes, common, bc_extra,
                               str(args.out / "runs" / f"{arm}_seed{seed}.json"))
                   for arm, seed in jobs]
        bc = [f.result() for f in bc_futures]
        results = [f.result() for f in futures]
    merged, merged_bc = load_merged(args.merge)  # this run's (arm, seed) first, then the first file holding one
    skip = set()
    for item in filter(None, args.skip.split(",")):
        arm, _, seed = item.partition(":")
        if arm not in ARMS or not seed.isdigit():
            p.error(f"--skip {item!r}: give ARM:SEED with ARM one of {ARMS}, e.g. sac:2")
        skip.add((arm, int(seed)))
    for r in merged:
        if (r["arm"], r["seed"]) not in skip | {(x["arm"], x["seed"]) for x in results}:
            results.append(r)
    for b in merged_bc:
        if b["seed"] not in {x["seed"] for x in bc}:
            bc.append(b)
    if not results:
        p.error("nothing to tabulate: the --merge files hold no runs")
    results.sort(key=lambda r: (r["seed"], ARMS.index(r["arm"])))
    seeds = sorted({r["seed"] for r in results})
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - start
    write_rows(args.out / "curves.json", results, args={k: str(v) for k, v in vars(args).items()}, bc=bc)
    plot(results, bc, args.out / "demos_vs_rl.png", f"{args.task}, demos: {demos.name}, {len(seeds)} seed(s)",
         args.xscale)
    print(f"\n{args.task}, {len(seeds)} seed(s)" + (f", UTD {args.utd}, {args.num_envs} envs, demos {demos}"
                                                    if not args.merge else " (settings: the merged runs')"))
    report(results, bc)
    print(f"wall {wall:.0f} s, CPU {children.ru_utime + children.ru_stime:.0f} s (all processes), load average "
          f"{load0[0]:.1f} at start / {os.getloadavg()[0]:.1f} at end (2 shared cores), workers {args.workers}")
    print(f"wrote {args.out / 'curves.json'} and {args.out / 'demos_vs_rl.png'}")


if __name__ == "__main__":
    main()
