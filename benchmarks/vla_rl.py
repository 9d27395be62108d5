"""VLA post-training with a critic: success of ``agent=vla_rl`` / ``agent=vla_ppo`` against the SFT policy it starts
from, per seed.

For one SFT run (``--policy``, an ``agent=vla`` run directory: its task and cameras are read from its
``config.yaml``): evaluate the SFT policy (``robot-rl eval --wrong-instruction``, ``--episodes`` from ``--eval-seed``);
then per seed train ``agent=vla_rl agent.method=<--method>`` (``agent=vla_ppo`` for ``--method flow_ppo``,
``agent=vla_guided`` for ``--method q_guided``) through
the normal command (``robot-rl train``, one torch thread, ``nice -n 5``, ``--steps`` env steps or ``--minutes`` of
wall, whichever comes first) and evaluate it the same way. Rows (one per seed, each with the SFT figure of the same
run, the training curve from the run's ``metrics.jsonl`` and the wall time) go to ``--out/<method>-<tag>.json``;
the table of every rows file to ``docs/results/vla_rl.md`` and the curves to ``docs/results/vla_rl.png``.

    python benchmarks/vla_rl.py --policy outputs/bench_vla_sft/so101_reach_lang-s2k3_kp30_gc_sn0_dart02 --seeds 0 1 2

``--baseline RUN ...`` evaluates, the same way, what a user would do instead of post-training: other ``agent=vla``
runs, e.g. the SFT recipe on twice the demonstrations in the same wall time (``benchmarks/vla_sft.py --demos 200``).
Their rows (run, its dataset's episode count, training wall from its log, success) go to
``--out/baseline-<tag>.json`` and the page gets a baselines table beside the RL one (dotted lines in the plot).

    python benchmarks/vla_rl.py --baseline outputs/bench_vla_sft/so101_reach_lang-2xdemos_dart02 --tag 2xdemos
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import yaml
from _results import RESULTS, commit_label, run_facts, write_rows
from vla_sft import pct, robot_rl

from robot_rl.agents.vla_rl import METHODS as NOISE_METHODS
from robot_rl.compose import compose
from robot_rl.data.lerobot.meta import load_info
from robot_rl.train.runner import DATASET_DESCRIPTION_DIR

OWN_AGENTS = {"flow_ppo": "vla_ppo", "q_guided": "vla_guided"}
"""Methods that are an agent of their own: ``--method`` -> ``agent=``."""
METHODS = (*NOISE_METHODS, *OWN_AGENTS)
"""``agent=vla_rl agent.method=<m>`` for the noise-space methods; the others are their :data:`OWN_AGENTS`."""
BASELINE = "baseline"
"""``method`` of a :func:`baseline_row` (a ``--baseline`` run's row)."""


def agent_args(method: str, critic: str | None) -> list[str]:
    """The ``robot-rl train`` arguments choosing ``method`` and its critic (None: the agent's default)."""
    chosen = [f"agent={OWN_AGENTS[method]}"] if method in OWN_AGENTS else ["agent=vla_rl", f"agent.method={method}"]
    return chosen + ([f"critic={critic}"] if critic else [])


def sft_facts(policy: Path) -> tuple[str, list[str]]:
    """``(task, cameras)`` of an ``agent=vla`` run directory, from its ``config.yaml``."""
    cfg = yaml.safe_load((policy / "config.yaml").read_text())
    if cfg.get("agent", {}).get("dataset") is None:
        raise SystemExit(f"{policy} is not an agent=vla run (its config.yaml has no agent.dataset)")
    return cfg["task"]["name"], list(cfg["task"]["env"]["cameras"])


def evaluation(run: Path, args: argparse.Namespace, env: dict[str, str], log: Path) -> dict:
    """``robot-rl eval --wrong-instruction`` of ``run``: ``{"named": ..., "wrong_instruction": ...}``."""
    out = robot_rl(["eval", str(run), "--episodes", str(args.episodes), "--num-envs", str(args.eval_envs),
                    "--seed", str(args.eval_seed), "--wrong-instruction"], env, log)
    summary = json.loads(out[out.index("{"):])
    return {"wrong_instruction": summary.pop("wrong_instruction"), "named": summary}


def sft_eval_key(run: Path, args: argparse.Namespace) -> dict:
    """What an SFT evaluation depends on: the run, its newest checkpoint (name, size, mtime) and the eval settings."""
    newest = max((run / "checkpoints").glob("step_*"), default=None)
    stamp = [newest.name, *[[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(newest.iterdir())]] \
        if newest else None
    return {"run": str(run), "checkpoint": stamp, "episodes": args.episodes, "eval_envs": args.eval_envs,
            "eval_seed": args.eval_seed}


def sft_evaluation(args: argparse.Namespace, env: dict[str, str], evaluate=evaluation) -> dict:
    """The SFT run's :func:`evaluation`, reused from ``<runs>/sft_eval.json`` when it was made of the same
    :func:`sft_eval_key` (a 100-episode evaluation costs ~4 min); ``--fresh-sft-eval`` re-runs it."""
    cache, key = args.runs / "sft_eval.json", sft_eval_key(args.policy, args)
    if cache.is_file() and not args.fresh_sft_eval:
        kept = json.loads(cache.read_text())
        if kept.get("key") == key:
            print(f"SFT evaluation reused from {cache} (--fresh-sft-eval re-runs it)", flush=True)
            return kept["evaluation"]
    result = evaluate(args.policy, args, env, args.runs / "sft_eval.log")
    cache.write_text(json.dumps({"key": key, "evaluation": result}, indent=1))
    return result


def curve(run: Path) -> list[dict]:
    """``[{"step", "wall_s", "success"}]`` of a run's log rows (success while collecting, with exploration)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{"step": r["step"], "wall_s": round(r["perf/wall_s"], 1), "success": r.get("episode/success")}
            for r in rows]


def run_seed(seed: int, task: str, cameras: list[str], args: argparse.Namespace, env: dict[str, str]) -> dict:
    """Train and evaluate one seed; the row."""
    name = f"{args.method}-{args.tag}-s{seed}" if args.tag else f"{args.method}-s{seed}"
    run, log = args.runs / name, args.runs / f"{name}.log"
    start = time.monotonic()
    robot_rl(["train", *agent_args(args.method, args.critic), f"agent.policy={args.policy}", f"task={task}",
              f"task.env.cameras=[{','.join(cameras)}]",
              "task.env.camera_obs=false", f"task.num_envs={args.num_envs}", f"task.total_steps={args.steps}",
              f"max_train_s={60 * args.minutes}", "eval_episodes=0", "export_formats=[]", "sim.num_threads=1",
              "logger.progress=false", f"seed={seed}", f"hydra.run.dir={run}",
              *(f"agent.{kv}" for kv in args.agent)], env, log)
    wall = time.monotonic() - start
    points = curve(run)
    return {"method": args.method, "seed": seed, "task": task, "run": str(run),
            "critic": args.critic or "agent's default",
            "agent": args.agent, "env_steps": points[-1]["step"] if points else 0, "train_wall_s": round(wall, 1),
            "eval_seed": args.eval_seed, "curve": points, **evaluation(run, args, env, log)}


def baseline_row(run: Path, args: argparse.Namespace, env: dict[str, str]) -> dict:
    """One ``--baseline`` run evaluated as the SFT policy is: its dataset's episode count (from the description the
    run keeps), its training wall (the log's last ``perf/wall_s``), :func:`evaluation`."""
    info = load_info(run / DATASET_DESCRIPTION_DIR)
    last = (curve(run) or [{"step": 0, "wall_s": 0.0}])[-1]
    return {"method": BASELINE, "run": str(run), "demos": info.total_episodes, "train_wall_s": last["wall_s"],
            "gradient_steps": last["step"], "eval_seed": args.eval_seed,
            **evaluation(run, args, env, args.runs / f"{run.name}.log")}


def baseline_table(rows: list[dict]) -> list[str]:
    """The baselines' lines of the page: run, demonstrations, training wall, success, wrong instruction."""
    if not rows:
        return []
    lines = ["", "Baselines a user would pick instead of post-training, evaluated the same way:", "",
             "| baseline run | demos | gradient steps | train wall | success | wrong instruction |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        n, w = r["named"], r["wrong_instruction"]
        lines.append(f"| `{Path(r['run']).name}` | {r['demos']} | {r['gradient_steps']:,} | "
                     f"{r['train_wall_s'] / 60:.1f} min | {pct(n['success_rate'], n['success_ci95'])} | "
                     f"{pct(w['success_rate'], w['success_ci95'])} |")
    return lines


@functools.cache
def critic_config(method: str, critic: str | None):
    """The critic config ``robot-rl train`` composes for ``method`` with ``critic=<critic>`` (None: the agent's own)."""
    return compose(agent_args(method, critic)).critic


def is_default_critic(method: str, critic: str) -> bool:
    """Whether ``critic=<critic>`` composes the same critic config as ``method``'s agent chooses by itself."""
    return critic_config(method, critic) == critic_config(method, None)


def configuration(r: dict) -> str:
    """A post-training row's method, critic (where not the agent's own: a row naming the default explicitly shares
    its seeds' configuration) and agent overrides: what its seeds share."""
    named = r["critic"] != "agent's default" and not is_default_critic(r["method"], r["critic"])
    critic = f" critic={r['critic']}" if named else ""
    return " ".join([f"{r['method']}{critic}", *(r.get("agent") or [])])


def by_configuration(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Post-training rows grouped by (:func:`configuration`, SFT run name), in order of first appearance."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((configuration(r), Path(r["sft_run"]).name), []).append(r)
    return groups


def configuration_table(rows: list[dict]) -> list[str]:
    """The page's per-configuration lines: each seed's evaluation, their mean and the mean over the SFT figure."""
    lines = ["", "Per configuration (the seeds of one method, critic and overrides from one SFT run):", "",
             "| configuration | SFT run | SFT success | seeds | success per seed | mean | mean / SFT |",
             "|---|---|---|---|---|---|---|"]
    for (config, sft_run), group in by_configuration(rows).items():
        group = sorted(group, key=lambda r: r["seed"])
        rates = [r["named"]["success_rate"] for r in group]
        # one run name may hold SFT trainings of one command evaluated apart: each figure shown, the ratio to their
        # mean over the seeds
        sfts = [r["sft"]["named"] for r in group]
        shown = " / ".join(dict.fromkeys(pct(s["success_rate"], s["success_ci95"]) for s in sfts))
        mean, sft_mean = sum(rates) / len(rates), sum(s["success_rate"] for s in sfts) / len(sfts)
        ratio = f"{mean / sft_mean:.2f}x" if sft_mean else "-"
        lines.append(f"| {config} | `{sft_run}` | {shown} | {len(rates)} | "
                     f"{', '.join(f'{100 * x:.0f}%' for x in rates)} | {100 * mean:.0f}% | {ratio} |")
    return lines


def table(rows: list[dict], metas: list[dict]) -> str:
    """The docs/results/vla_rl.md page of ``rows`` (post-training seeds and :func:`baseline_row` rows) and their
    files' ``metas``."""
    baselines = [r for r in rows if r["method"] == BASELINE]
    rows = [r for r in rows if r["method"] != BASELINE]
    lines = ["# VLA post-training with critics (`benchmarks/vla_rl.py`)", "",
             "Success on 100 evaluation episodes (seed 1000 unless said) of the SFT policy and of each post-trained "
             "seed, both told the right instruction and another target's (wrong); Wilson 95% intervals. Training "
             "success is measured while collecting (with the actor's exploration noise); the curves are in "
             "`vla_rl.png`, one panel per SFT run.", "",
             "| method | critic | agent overrides | SFT run | seed | env steps | train wall | SFT success | "
             "RL success | RL / SFT | wrong instruction |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sft, rl, wrong = r["sft"]["named"], r["named"], r["wrong_instruction"]
        ratio = rl["success_rate"] / sft["success_rate"] if sft["success_rate"] else float("nan")
        overrides = " ".join(r.get("agent") or []) or "-"
        lines.append(f"| {r['method']} | {r['critic']} | {overrides} | `{Path(r['sft_run']).name}` | {r['seed']} | "
                     f"{r['env_steps']:,} | {r['train_wall_s'] / 60:.1f} min | "
                     f"{pct(sft['success_rate'], sft['success_ci95'])} | {pct(rl['success_rate'], rl['success_ci95'])}"
                     f" | {ratio:.2f}x | {pct(wrong['success_rate'], wrong['success_ci95'])} |")
    lines += configuration_table(rows) if rows else []
    lines += baseline_table(baselines)
    lines += ["", "Commands, commits and load:", ""]
    lines += [f"- `{m['command']}` (commit {commit_label(m)}, {m.get('date', '')[:10]})" for m in metas]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Training success against env steps: one panel per SFT run (its evaluation dashed, the baselines of its task
    dotted), one colour per :func:`configuration`, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    baselines = [r for r in rows if r["method"] == BASELINE]
    groups = by_configuration([r for r in rows if r["method"] != BASELINE])
    sft_runs = list(dict.fromkeys(sft_run for _, sft_run in groups)) or ["-"]
    fig, axes = plt.subplots(len(sft_runs), 1, figsize=(11, 3.2 * len(sft_runs)), squeeze=False)
    for ax, sft_run in zip(axes[:, 0], sft_runs, strict=True):
        mine = [(config, group) for (config, run), group in groups.items() if run == sft_run]
        colours = plt.cm.tab10.colors if len(mine) <= 10 else plt.cm.tab20.colors
        for i, (config, group) in enumerate(mine):
            evals = "/".join(f"{100 * r['named']['success_rate']:.0f}" for r in group)
            for j, r in enumerate(group):
                points = [p for p in r["curve"] if p["success"] is not None]
                ax.plot([p["step"] for p in points], [p["success"] for p in points], color=colours[i % len(colours)],
                        linewidth=1.0, label=f"{config} (seeds {len(group)}; eval {evals}%)" if j == 0 else None)
        if mine:
            sft = mine[0][1][0]["sft"]["named"]["success_rate"]
            ax.axhline(sft, linestyle="--", color="grey", linewidth=0.8, label=f"SFT evaluation ({100 * sft:.0f}%)")
        task = sft_run.split("-")[0]
        for b in baselines:
            if Path(b["run"]).name.split("-")[0] == task:
                ax.axhline(b["named"]["success_rate"], linestyle=":", color="black", linewidth=1.0,
                           label=f"baseline {Path(b['run']).name} ({100 * b['named']['success_rate']:.0f}%)")
        ax.set_title(f"from SFT run {sft_run}", fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("success while collecting")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--policy", type=Path, help="the agent=vla run directory to post-train (required unless "
                                               "--table-only)")
    p.add_argument("--method", choices=METHODS, default="dsrl")
    p.add_argument("--critic", default=None, help="critic= option (default: the agent's own, ensemble_ln for "
                                                  "dsrl, best_of_n and q_guided, mlp for flow_ppo)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=100_000, help="env steps per seed (all envs)")
    p.add_argument("--minutes", type=float, default=60.0, help="training wall budget per seed")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--agent", nargs="*", default=[], help="extra agent.KEY=VALUE overrides, e.g. utd_ratio=2")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    p.add_argument("--eval-envs", type=int, default=25)
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--fresh-sft-eval", action="store_true",
                   help="evaluate the SFT run again even if <runs>/sft_eval.json holds an evaluation of the same "
                        "checkpoint and settings")
    p.add_argument("--tag", default="", help="suffix of the run and rows file names, to keep variants")
    p.add_argument("--runs", type=Path, default=Path("outputs/bench_vla_rl"))
    p.add_argument("--out", type=Path, default=RESULTS / "vla_rl")
    p.add_argument("--baseline", type=Path, nargs="+", default=[],
                   help="agent=vla runs to evaluate as baselines instead of post-training (e.g. SFT on twice the "
                        "demonstrations); rows to <out>/baseline-<tag>.json")
    p.add_argument("--table-only", action="store_true", help="only rewrite the table and plot from --out's rows")
    args = p.parse_args()
    if args.table_only:
        write_table(args.out)
        return
    if args.policy is None and not args.baseline:
        p.error("--policy is required (the agent=vla run directory to post-train), or --baseline runs to evaluate")
    args.runs = args.runs.resolve()
    args.runs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "EGL_PLATFORM": os.environ.get("EGL_PLATFORM", "surfaceless")}
    if args.baseline:
        evaluate_baselines(args, env)
        return
    args.policy = args.policy.resolve()
    task, cameras = sft_facts(args.policy)
    sft = sft_evaluation(args, env)
    print(f"SFT {args.policy.name}: {pct(sft['named']['success_rate'], sft['named']['success_ci95'])}", flush=True)
    rows = []
    for seed in args.seeds:
        row = {**run_seed(seed, task, cameras, args, env), "sft_run": str(args.policy), "sft": sft}
        rows.append(row)
        n = row["named"]
        print(f"{args.method} seed {seed}: {pct(n['success_rate'], n['success_ci95'])} vs SFT "
              f"{pct(sft['named']['success_rate'], sft['named']['success_ci95'])}, {row['env_steps']:,} steps in "
              f"{row['train_wall_s'] / 60:.1f} min", flush=True)
        write_results(args, rows)  # after every seed: a cut-off run keeps the seeds it finished


def evaluate_baselines(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Evaluate every ``--baseline`` run (:func:`baseline_row`) and write their rows file, table and plot."""
    rows = []
    for run in args.baseline:
        sft_facts(run)  # an agent=vla run, or a clear exit
        rows.append(baseline_row(run.resolve(), args, env))
        n = rows[-1]["named"]
        print(f"baseline {run.name}: {pct(n['success_rate'], n['success_ci95'])} ({rows[-1]['demos']} demos, "
              f"{rows[-1]['train_wall_s'] / 60:.1f} min of training)", flush=True)
    args.method = BASELINE
    write_results(args, rows)


def write_results(args: argparse.Namespace, rows: list[dict]) -> None:
    """This run's rows file, then the table and plot of every rows file in ``args.out``."""
    name = f"{args.method}-{args.tag}.json" if args.tag else f"{args.method}.json"
    write_rows(args.out / name, rows)
    write_table(args.out)


def write_table(out: Path) -> None:
    """The table and plot of every rows file in ``out``, beside it (``vla_rl.md``, ``vla_rl.png``)."""
    files = sorted(out.glob("*.json"))
    every = [row for f in files for row in json.loads(f.read_text())["rows"]]
    metas = [json.loads(f.read_text())["meta"] for f in files] or [run_facts(sys.argv)]
    (out.parent / "vla_rl.md").write_text(table(every, metas))
    plot(every, out.parent / "vla_rl.png")
    print(f"table written to {out.parent / 'vla_rl.md'}")


if __name__ == "__main__":
    main()
