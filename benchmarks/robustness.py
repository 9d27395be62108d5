"""Robustness: the fuzz corpus, and kill -9 campaigns against training and recording.

Three layers, one table:

- **fuzz**: every malformed input of ``tests/fuzz_cases_*.py`` (robot.yaml, policy artifact,
  checkpoint, dataset, Hydra config, command line), each run as a user runs it (its own
  ``python -m robot_rl.cli`` process with ``--isolated``, or in this process), classified as clear
  (exit 2 naming the file and key), vague, silent (exit 0), traceback or other, and checked to lose
  nothing (protected files byte for byte).
- **kill -9 train**: a tiny PPO run checkpointing every update is SIGKILLed at random points, half of
  them the moment a checkpoint write starts (a ``.tmp_*`` folder appears); every checkpoint left
  must load (checksums verified), then ``robot-rl train resume=<run>`` must finish the run from the
  newest intact one without deleting it first.
- **kill -9 record**: ``robot-rl record`` is SIGKILLed at random points; the dataset must then be
  readable, keep every episode that was complete, and ``record --resume`` must finish it.

Usage::

    ROBOT_RL_ASSETS=../shared/robots python benchmarks/robustness.py --isolated

The rows (with the command, commit, load and machine: ``benchmarks/_results.py``) go to ``--out``,
``docs/results/robustness/robustness.json`` by default, and the table beside them (``.md``).

Targets (issue 14): 0 tracebacks and 0 silent exits over the corpus; 10/10 resumes after kill -9
with no corrupt or lost-good checkpoint; 10/10 recordings readable, at most the episodes in
progress lost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from _results import RESULTS, write_rows  # noqa: E402
from fuzz_harness import TRAIN_TINY, build_good_inputs, corpus, run_case  # noqa: E402

TRAIN_KILL = ["task.num_envs=8", "task.total_steps=16384", "agent.num_steps_per_env=8", "agent.actor_hidden_dims=[16]",
              "eval_episodes=0", "logger=none", "logger.progress=false", "checkpoint_interval=1", "export_formats=[]"]
TRAIN_KILL_STEPS = 16384
"""256 updates (~20 s here), a checkpoint after every one: many checkpoint writes to be killed in."""


def _cli(*argv: str, cwd: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "robot_rl.cli", *argv]


def fuzz(isolated: bool, root: Path) -> list[dict]:
    """Run the whole corpus; one row per case."""
    good = build_good_inputs(root / "good")
    rows = []
    cases = corpus()
    for i, case in enumerate(cases):
        outcome = run_case(case, root / "cases" / f"{i:03d}", good, isolated=isolated)
        rows.append({"layer": "fuzz", "name": case.name, "kind": case.kind, "verdict": outcome.verdict,
                     "rc": outcome.rc, "lost": outcome.lost, "message": outcome.message[-300:]})
        mark = "" if outcome.verdict == "clear" and not outcome.lost else f"  <-- {outcome.verdict} {outcome.lost}"
        print(f"[{i + 1:3d}/{len(cases)}] {case.name}{mark}", flush=True)
    return rows


def _intact_checkpoints(run: Path) -> tuple[list[int], list[str]]:
    """(steps of the checkpoints that load, names of those that do not)."""
    from robot_rl.checkpoint import list_checkpoints, load_checkpoint

    good, bad = [], []
    for path in list_checkpoints(run):
        try:
            good.append(load_checkpoint(path)[0])
        except (OSError, ValueError) as exc:  # a corrupt checkpoint: named in the row, never resumed from
            bad.append(f"{path.name}: {exc}")
    return good, bad


def _wait_for(run: Path, prefix: str, deadline: float) -> bool:
    """Poll ``run/checkpoints`` until an entry named ``prefix*`` appears (``.tmp_``: a write in progress)."""
    root = run / "checkpoints"
    while time.monotonic() < deadline:
        if root.is_dir() and any(e.name.startswith(prefix) for e in os.scandir(root)):
            return True
        time.sleep(0.0005)
    return False


def kill_train(trials: int, seed: int, root: Path) -> list[dict]:
    """SIGKILL a training run per trial (odd trials: as a checkpoint write starts), then resume it."""
    rng = random.Random(seed)
    rows = []
    for trial in range(trials):
        run = root / f"train_{trial}"
        during_write = trial % 2 == 1
        proc = subprocess.Popen(_cli("train", *TRAIN_KILL, f"seed={trial}", f"hydra.run.dir={run}"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(run, "step_", time.monotonic() + 120)  # past start-up: the first checkpoint is written
        time.sleep(rng.uniform(0.0, 6.0))  # well inside the run: every kill lands while it trains
        hit = during_write and _wait_for(run, ".tmp_", time.monotonic() + 30)
        finished_before_kill = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        steps_before, corrupt = _intact_checkpoints(run)
        resume = subprocess.run(_cli("train", f"resume={run}"), capture_output=True, text=True)
        steps_after, corrupt_after = _intact_checkpoints(run)
        newest_before = max(steps_before, default=-1)
        lost_good = newest_before > max(steps_after, default=-1)
        leftover_tmp = sorted(p.name for p in (run / "checkpoints").glob(".tmp_*")) if (run / "checkpoints").is_dir() \
            else []
        rows.append({"layer": "kill_train", "trial": trial, "during_checkpoint_write": hit,
                     "finished_before_kill": finished_before_kill, "intact_before": len(steps_before),
                     "newest_before": newest_before, "corrupt_before": corrupt, "resume_rc": resume.returncode,
                     "newest_after": max(steps_after, default=-1), "corrupt_after": corrupt_after,
                     "lost_good": lost_good, "leftover_tmp": leftover_tmp,
                     "resumed": (resume.returncode == 0 and max(steps_after, default=-1) >= TRAIN_KILL_STEPS
                                 and not corrupt_after),
                     "stderr_tail": resume.stderr[-400:]})
        r = rows[-1]
        print(f"kill train {trial}: {'during a checkpoint write' if hit else 'at a random point'}, "
              f"{r['intact_before']} intact (newest {newest_before}), resume rc {resume.returncode} -> newest "
              f"{r['newest_after']}, corrupt {len(corrupt) + len(corrupt_after)}, lost good {lost_good}", flush=True)
    return rows


def _committed(dataset: Path) -> int:
    """Episodes ``meta/info.json`` (the writer's commit point) counts now; -1 before it exists or mid-replace."""
    try:
        return json.loads((dataset / "meta" / "info.json").read_text())["total_episodes"]
    except (OSError, ValueError, KeyError):
        return -1


def kill_record(trials: int, seed: int, root: Path) -> list[dict]:
    """SIGKILL ``robot-rl record`` per trial at a random point, check the dataset, then resume it.

    While the recorder runs, its committed episode count is polled every 5 ms: the last count seen
    before the kill is a lower bound of what was complete, and every one of those must survive.
    """
    from robot_rl.data.lerobot.recovery import check_after_crash

    rng = random.Random(seed + 1)
    rows = []
    episodes = 120  # ~15 s of recording here: every kill lands while it runs
    for trial in range(trials):
        out = root / f"record_{trial}"
        argv = ["record", "--task", "so101_reach", "--out", str(out), "--episodes", str(episodes), "--num-envs", "1",
                "--seed", str(trial), "--override", "episode_s=0.5"]
        proc = subprocess.Popen(_cli(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not out.exists() and proc.poll() is None:  # start-up (imports) is not part of the recording
            time.sleep(0.005)
        deadline, committed = time.monotonic() + rng.uniform(0.0, 6.0), 0
        while time.monotonic() < deadline and proc.poll() is None:
            committed = max(committed, _committed(out))
            time.sleep(0.005)
        finished_before_kill = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        readable, kept = check_after_crash(out)
        resume = subprocess.run(_cli(*argv, "--resume"), capture_output=True, text=True)
        final_readable, final_kept = check_after_crash(out, repair_first=False)
        rows.append({"layer": "kill_record", "trial": trial, "finished_before_kill": finished_before_kill,
                     "committed_before_kill": committed, "readable": readable, "kept": kept,
                     "lost": max(committed - kept, 0), "resume_rc": resume.returncode,
                     "final_readable": final_readable, "final_episodes": final_kept,
                     "stderr_tail": resume.stderr[-400:]})
        print(f"kill record {trial}: {committed} episodes complete at the kill, readable {readable} with {kept} "
              f"kept; resume rc {resume.returncode} -> {final_kept}/{episodes}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """The summary table printed and written beside the rows."""
    lines = ["| layer | tried | clear | vague | silent | tracebacks | other | resumed / readable | data lost |",
             "|---|---|---|---|---|---|---|---|---|"]
    fz = [r for r in rows if r["layer"] == "fuzz"]
    if fz:
        v = Counter(r["verdict"] for r in fz)
        lost = sum(bool(r["lost"]) for r in fz)
        lines.append(f"| fuzz corpus | {len(fz)} | {v['clear']} | {v['vague']} | {v['silent']} | {v['traceback']} | "
                     f"{v['other']} | - | {lost} cases |")
        for kind in sorted({r["kind"] for r in fz}):
            k = [r for r in fz if r["kind"] == kind]
            vk = Counter(r["verdict"] for r in k)
            lines.append(f"| &nbsp; {kind} | {len(k)} | {vk['clear']} | {vk['vague']} | {vk['silent']} | "
                         f"{vk['traceback']} | {vk['other']} | - | {sum(bool(r['lost']) for r in k)} |")
    kt = [r for r in rows if r["layer"] == "kill_train"]
    if kt:
        corrupt = sum(len(r["corrupt_before"]) + len(r["corrupt_after"]) for r in kt)
        during = sum(r["during_checkpoint_write"] for r in kt)
        early = sum(r["finished_before_kill"] for r in kt)
        lines.append(f"| kill -9 train ({during} during a checkpoint write, {early} finished before) | {len(kt)} "
                     f"| - | - | - | - | - | {sum(r['resumed'] for r in kt)}/{len(kt)} resumed "
                     f"| {sum(r['lost_good'] for r in kt)} lost good, {corrupt} corrupt |")
    kr = [r for r in rows if r["layer"] == "kill_record"]
    if kr:
        early = sum(r["finished_before_kill"] for r in kr)
        resumed = sum(r["final_readable"] and r["resume_rc"] == 0 for r in kr)
        lines.append(f"| kill -9 record ({early} finished before the kill) | {len(kr)} | - | - | - | - | - "
                     f"| {sum(r['readable'] for r in kr)}/{len(kr)} readable, {resumed}/{len(kr)} resumed "
                     f"| {sum(r['lost'] for r in kr)} complete episodes |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="fuzz,train,record", help="comma-separated subset of fuzz,train,record")
    p.add_argument("--isolated", action="store_true", help="run each fuzz case in its own process (as users do)")
    p.add_argument("--kills", type=int, default=10, help="kill -9 trials per campaign (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill times")
    p.add_argument("--out", type=Path, default=RESULTS / "robustness" / "robustness.json",
                   help="write the rows (JSON) and the table (.md) here (default: %(default)s)")
    args = p.parse_args()
    layers = {s.strip() for s in args.layers.split(",")}
    rows: list[dict] = []
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="robustness_") as tmp:
        root = Path(tmp)
        if "fuzz" in layers:
            rows += fuzz(args.isolated, root / "fuzz")
        if "train" in layers:
            rows += kill_train(args.kills, args.seed, root / "kill")
        if "record" in layers:
            rows += kill_record(args.kills, args.seed, root / "kill")
    text = table(rows)
    print(text)
    settings = {"wall_s": round(time.time() - start, 1), "isolated": args.isolated, "train_overrides": TRAIN_KILL,
                "fuzz_good_run_overrides": TRAIN_TINY}
    write_rows(args.out, rows, settings=settings)
    args.out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
