"""Time to skill: wall-clock to 90% ``so101_reach`` training success for a fast recipe, our default PPO and
rsl_rl's PPO (PyPI ``rsl-rl-lib``), side by side over several seeds in one run.

The three arms, each on ``task=so101_reach`` with its own config's budget (``task.total_steps``):

- ``fast``: ``recipe=reach_fast`` (``configs/recipe/reach_fast.yaml``; ``--recipe`` picks another), what
  ``robot-rl train recipe=reach_fast`` trains;
- ``default``: ``robot-rl train task=so101_reach``, the defaults of the README's main job (``agent=ppo`` as
  ``configs/agent/ppo.yaml``, 128 envs, 2M steps) on the plain task;
- ``rsl_rl``: rsl_rl's PPO with the default's hyperparameters, through ``benchmarks/ppo_vs_rsl_rl.py``'s
  adapter (that benchmark prints what differs between the two PPOs).

"To 90%" is one definition for all three, measured by the same recorder (``ppo_vs_rsl_rl.Recorder``) and
printed: the wall seconds from the first env step to the first finished batch of episodes at which the success
rate of the last ``--window`` finished training episodes reaches ``--threshold`` (a fixed number of episodes,
128 by default: ``ppo_vs_rsl_rl``'s window at the default's 128 envs, kept whatever env count a recipe runs). A
run that never gets there within its budget is "not reached". Per arm: every seed's time, the median over seeds
(a not-reached seed counts as slower than any that reached it; where the median falls on one, the median is
"not reached"), whether every seed reached it, and the ratios of the medians fast / rsl_rl and default /
rsl_rl. An arm's training stops when it first reaches the threshold (``ppo_vs_rsl_rl.Recorder``'s ``stop_at``;
``--full-budget``: train to the whole budget) and the policy of that moment is evaluated deterministically
(``--eval-episodes``).

Runs go one at a time (the target is a wall time on a machine doing nothing else; the load average is
recorded), the arms' order rotated per seed (seed ``s`` starts with arm ``s mod 3``) so a load change does
not always hit the same arm. Target (issue 20): the fast arm's median <= 60 s on the 2-core machine, every
seed reaching 90%.

    python benchmarks/time_to_skill.py                      # seeds 0-4, the three arms, each stopped at 90%
    python benchmarks/time_to_skill.py --seeds 0,1,2,3,4,5,6 --recipe reach_fast
    python benchmarks/time_to_skill.py --page-only          # rewrite the markdown page from the rows file
    python benchmarks/time_to_skill.py --arms fast --out docs/results/agents/time_to_skill_fast_rsl_settings.json \
        --page docs/results/time_to_skill_fast_rsl_settings.md agent.critic_learning_rate=null \
        agent.normalize_rewards=false                       # one arm, without the two options rsl_rl lacks

Rows (per seed and arm) go to ``--out`` (default ``docs/results/agents/time_to_skill.json``) with the
settings, the summary, the command, commit, load and machine; the page ``docs/results/time_to_skill.md`` is
written from that file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import REPO, RESULTS, write_rows
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException
from ppo_vs_rsl_rl import describe, result_rows, run_overrides, run_side, seed_list

from robot_rl.compose import compose
from robot_rl.errors import InputError

ARMS = ("fast", "default", "rsl_rl")
"""Arm labels, in the order of the tables; ``rsl_rl`` is the reference of the ratios."""

PAGE = RESULTS / "time_to_skill.md"


def arm_overrides(recipe: str) -> dict[str, tuple[str, list[str]]]:
    """Per arm: the trainer (``run_side``'s ``robot_rl`` or ``rsl_rl``) and the overrides beyond the shared ones."""
    return {"fast": ("robot_rl", [f"recipe={recipe}"]), "default": ("robot_rl", []), "rsl_rl": ("rsl_rl", [])}


def arm_list(text: str) -> list[str]:
    """The ``--arms`` argument: comma-separated arms among :data:`ARMS`."""
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated arms among {', '.join(ARMS)}")
    return arms


def run_order(seed: int) -> list[str]:
    """The arms in the order seed ``seed`` runs them: :data:`ARMS` rotated by ``seed mod 3``."""
    k = seed % len(ARMS)
    return [*ARMS[k:], *ARMS[:k]]


def definition(threshold: float, window: int) -> str:
    """The "to X%" definition, printed and stored with the rows."""
    return (f"to {threshold:.0%}: wall seconds from the first env step to the first finished batch of episodes at "
            f"which the success rate of the last {window} finished training episodes is >= {threshold:.0%}")


def config_changes(base: Any, other: Any, prefix: str = "") -> list[str]:
    """``key base -> other`` for every field of dataclass ``other`` that differs from ``base`` (nested
    dataclasses recursed; a different dataclass type is one change naming both types)."""
    if type(base) is not type(other):
        return [f"{prefix.rstrip('.')}: {type(base).__name__} -> {type(other).__name__}"]
    changes = []
    for f in dataclasses.fields(other):
        a, b = getattr(base, f.name), getattr(other, f.name)
        if dataclasses.is_dataclass(b):
            changes += config_changes(a, b, f"{prefix}{f.name}.")
        elif a != b:
            changes.append(f"{prefix}{f.name} {a} -> {b}")
    return changes


def median_time(times: list[float | None]) -> float | None:
    """Median of per-seed times where ``None`` is a seed that never reached the threshold (slower than any that
    did); ``None`` when the median falls on such a seed (even counts: when either middle one is)."""
    if not times:
        return None
    ordered = sorted(times, key=lambda t: (t is None, t or 0.0))
    n = len(ordered)
    middle = ordered[(n - 1) // 2: n // 2 + 1]
    return None if None in middle else sum(middle) / len(middle)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm of ``rows`` (one per seed and arm, :func:`rows_of` layout): seeds, each seed's wall to the threshold
    (None: not reached), medians of wall / CPU / env steps to it, seeds that reached it, whether all did; then
    the ratios of the median walls to rsl_rl's (None where either median is not reached)."""
    arms: dict[str, Any] = {}
    for arm in ARMS:
        mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["seed"])
        if not mine:
            continue
        reached = [r["seed"] for r in mine if r["to_threshold_wall_s"] is not None]
        arms[arm] = {"seeds": [r["seed"] for r in mine],
                     "wall_s": [r["to_threshold_wall_s"] for r in mine],
                     "median_wall_s": median_time([r["to_threshold_wall_s"] for r in mine]),
                     "median_cpu_s": median_time([r["to_threshold_cpu_s"] for r in mine]),
                     "median_env_steps": median_time([r["to_threshold_env_steps"] for r in mine]),
                     "reached": len(reached), "all_reached": len(reached) == len(mine)}
    ref = arms.get("rsl_rl", {}).get("median_wall_s")
    ratios = {f"{arm}/rsl_rl": (s["median_wall_s"] / ref if ref and s["median_wall_s"] is not None else None)
              for arm, s in arms.items() if arm != "rsl_rl" and "rsl_rl" in arms}  # no ratios without rsl_rl
    return {"arms": arms, "median_wall_ratios": ratios}


def rows_of(results: dict[int, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (seed, arm) of ``{seed: {arm: run_side's result}}``: ``ppo_vs_rsl_rl.result_rows``' row with
    ``side`` named ``arm``."""
    return [{"arm": r.pop("side"), **r} for r in result_rows(results)]


def _time(t: float | None) -> str:
    return f"{t:.1f} s" if t is not None else "not reached"


def _median(s: dict[str, Any]) -> str:
    n = len(s["seeds"])
    if s["median_wall_s"] is None:
        return f"not reached ({s['reached']}/{n} seeds reached it)"
    every = "every seed reached it" if s["all_reached"] else f"only {s['reached']}/{n} seeds reached it"
    return f"{s['median_wall_s']:.1f} s ({every})"


def _ratio(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "n/a (a median not reached)"


def report(summary: dict[str, Any], target_s: float) -> list[str]:
    """The closing lines: per arm every seed's time and the median, the ratios, the target's verdict."""
    lines = []
    for arm, s in summary["arms"].items():
        seeds = ", ".join(f"seed {k} {_time(t)}" for k, t in zip(s["seeds"], s["wall_s"], strict=True))
        lines.append(f"{arm:8s} median {_median(s)}; {seeds}")
    lines += [f"median wall {k}: {_ratio(v)}" for k, v in summary["median_wall_ratios"].items()]
    fast = summary["arms"].get("fast")
    if fast:
        met = fast["all_reached"] and fast["median_wall_s"] is not None and fast["median_wall_s"] <= target_s
        lines.append(f"target: fast median <= {target_s:.0f} s with every seed reaching it: "
                     f"{'met' if met else 'NOT met'}")
    return lines


def page(data: dict[str, Any], rows_file: str = "docs/results/agents/time_to_skill.json") -> str:
    """The ``docs/results/time_to_skill.md`` page of one rows file (``write_rows``' layout) at ``rows_file``."""
    meta, settings, summary = data["meta"], data["settings"], data["summary"]
    to = f"to {settings['threshold']:.0%}"
    lines = [f"# Time to skill: so101_reach {to} success", "",
             f"Written by `benchmarks/time_to_skill.py` (raw rows in `{rows_file}`). Arms: "
             "*fast* `robot-rl train recipe=" + settings["recipe"] + "`, *default* `robot-rl train task=so101_reach` "
             "(agent=ppo defaults), *rsl_rl* rsl_rl's PPO with the default's hyperparameters; one run at a time. "
             f"Definition, the same for every arm: {settings['definition']}; not reached = not within the arm's "
             "budget. Medians count a not-reached seed as slower than any that reached it.", "",
             f"- Command: `{meta['command']}`; commit {meta.get('commit', '?')}"
             f"{' (dirty tree)' if meta.get('dirty') else ''}; load average {meta['load_average']['start']} -> "
             f"{meta['load_average']['end']}; {meta['date']}.",
             f"- Arms run: {', '.join(settings.get('arms', ARMS))}; overrides for every arm: "
             f"{' '.join(settings.get('overrides') or []) or 'none'}.",
             f"- fast vs default: {'; '.join(settings['fast_changes']) or 'no change'}.",
             f"- {report(summary, settings['target_s'])[-1]} (issue 20).",
             f"- default and rsl_rl: {settings['default']}", "",
             f"| seed | arm | wall {to} | CPU {to} | env steps {to} | budget (env steps) | run wall | load | "
             "final eval success |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(data["rows"], key=lambda r: (r["seed"], ARMS.index(r["arm"]))):
        hit = r["to_threshold_wall_s"] is not None
        cpu = f"{r['to_threshold_cpu_s']:.1f} s" if hit else "-"
        steps = f"{r['to_threshold_env_steps']:,}" if hit else "-"
        lines.append(f"| {r['seed']} | {r['arm']} | {_time(r['to_threshold_wall_s'])} | {cpu} | {steps} | "
                     f"{settings['budgets'][r['arm']]:,} | {r['wall_s']:.0f} s | {r['load']:.1f} | "
                     f"{100 * r['eval']['success_rate']:.0f}% |")
    lines += ["", f"| arm | median wall {to} | seeds reached | median CPU {to} | median env steps {to} | "
              "median wall / rsl_rl |", "|---|---|---|---|---|---|"]
    for arm, s in summary["arms"].items():
        ratio = ("reference" if arm == "rsl_rl" else "n/a (rsl_rl not run)" if "rsl_rl" not in summary["arms"]
                 else _ratio(summary["median_wall_ratios"].get(f"{arm}/rsl_rl")))
        steps = f"{s['median_env_steps']:,.0f}" if s["median_env_steps"] is not None else "not reached"
        lines.append(f"| {arm} | {_time(s['median_wall_s'])} | {s['reached']}/{len(s['seeds'])} | "
                     f"{_time(s['median_cpu_s'])} | {steps} | {ratio} |")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=seed_list, default="0,1,2,3,4", help="comma-separated seeds (default 0,1,2,3,4)")
    p.add_argument("--recipe", default="reach_fast", help="the fast arm's configs/recipe/<name>.yaml")
    p.add_argument("--arms", type=arm_list, default=list(ARMS),
                   help="comma-separated arms to train (default all: fast,default,rsl_rl); the ratios need rsl_rl")
    p.add_argument("--threshold", type=float, default=0.9, help="training success threshold (default 0.9)")
    p.add_argument("--window", type=int, default=128,
                   help="finished episodes of the training success (default 128, ppo_vs_rsl_rl's at 128 envs)")
    p.add_argument("--target", type=float, default=60.0, help="the fast arm's target median wall s (default 60)")
    p.add_argument("--full-budget", action="store_true",
                   help="train every arm to its whole budget (default: stop an arm when it first reaches the "
                        "threshold and evaluate the policy of that moment)")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as sim=cpu)")
    p.add_argument("--out", type=Path, default=RESULTS / "agents" / "time_to_skill.json", help="rows file")
    p.add_argument("--page", type=Path, default=PAGE, help="markdown page written from the rows file")
    p.add_argument("--page-only", action="store_true", help="only rewrite --page from an existing --out")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every arm, e.g. sim.num_threads=2")
    args = p.parse_args()
    if not args.page_only:
        seeds = args.seeds
        torch.set_num_threads(args.threads)
        over = run_overrides(args.overrides)
        arms = arm_overrides(args.recipe)
        try:
            cfgs = {arm: compose([*over, *extra, f"seed={seeds[0]}"]) for arm, (_, extra) in arms.items()}
        except (HydraException, OmegaConfBaseException, InputError) as exc:
            p.error(f"--recipe {args.recipe} / overrides {args.overrides}: {str(exc).splitlines()[0]}")
        settings = {"recipe": args.recipe, "definition": definition(args.threshold, args.window),
                    "threshold": args.threshold, "window": args.window, "target_s": args.target,
                    "stop_at_threshold": not args.full_budget, "arms": args.arms,
                    "overrides": args.overrides,
                    "default": describe(cfgs["default"]).replace("\n", "; "),
                    "fast_changes": config_changes(cfgs["default"], cfgs["fast"]),
                    "budgets": {arm: cfg.task.total_steps for arm, cfg in cfgs.items()}}
        print(f"{settings['definition']}\nfast vs default: {'; '.join(settings['fast_changes'])}\n"
              f"default and rsl_rl: {describe(cfgs['default'])}\nload average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs, {args.threads} torch thread(s)", flush=True)
        results: dict[int, dict[str, dict[str, Any]]] = {seed: {} for seed in seeds}
        for seed in seeds:
            for arm in (a for a in run_order(seed) if a in args.arms):
                side, extra = arms[arm]
                r = run_side(side, [*over, *extra], seed, args.eval_episodes, args.threshold, args.threads,
                             args.window, stop=not args.full_budget)
                results[seed][arm] = r
                print(f"seed {seed} {arm} (trained by {side}): {_time(r['hit'] and r['hit'][0])} to "
                      f"{args.threshold:.0%}", flush=True)
        rows = rows_of(results)
        summary = summarise(rows)
        print("\n".join(["", *report(summary, args.target)]))
        write_rows(args.out, rows, settings=settings, summary=summary)
    if not args.out.is_file():
        p.error(f"--out {args.out}: no rows file to write the page from (run the benchmark first)")
    out = args.out.resolve()
    rows_file = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    args.page.write_text(page(json.loads(args.out.read_text()), str(rows_file)))
    print(f"page written to {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
