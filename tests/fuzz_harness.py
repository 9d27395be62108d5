"""The fuzz harness: malformed inputs handed to ``robot-rl``, each expected to be refused clearly.

A :class:`FuzzCase` writes one malformed input (a robot.yaml, a policy artifact, a checkpoint, a
dataset, a Hydra config value or a command line) into its own folder and returns the ``robot-rl``
argv that reads it. :func:`run_case` runs that argv in this process and classifies the outcome:

- ``clear``: exit code 2 and every ``expect`` substring (the file, the key) in the message;
- ``vague``: exit code 2, but the message misses an ``expect`` substring;
- ``silent``: exit code 0 (the bad input was accepted);
- ``traceback``: an exception escaped ``robot_rl.cli.main`` or a traceback was printed;
- ``other``: any other exit code.

and whether it lost anything: every ``protect`` path must hold the same bytes after the command.

The corpus is the union of the ``cases()`` of every ``fuzz_cases_*.py`` module beside this file
(one per file kind); ``tests/test_fuzz.py`` runs it and ``benchmarks/robustness.py`` tabulates it.
The good inputs each case corrupts are built once (:class:`GoodInputs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
KINDS = ("robot_yaml", "artifact", "vla_artifact", "checkpoint", "dataset", "config", "cli")


@dataclass(frozen=True)
class GoodInputs:
    """Pristine inputs the cases copy and corrupt (never modify these in place).

    Attributes:
        robot_yaml: a copy of ``hardware/so101/robot.yaml``.
        run: a tiny finished PPO run on so101_reach (``config.yaml``, ``checkpoints/``, ``policy/``).
        artifact: ``run/policy`` (policy.yaml + policy.onnx + policy.pt).
        dataset: a 2-episode LeRobot v3 dataset recorded from the so101_reach expert.
        root: the folder of all of them; :meth:`vla_artifact` is built there on first use.
    """

    robot_yaml: Path
    run: Path
    artifact: Path
    dataset: Path
    root: Path
    vla_source: Path | None = None

    def vla_artifact(self) -> Path:
        """tests/vla_small.py's untrained VLA artifact for so101 (cameras front + wrist, 32x32, chunk 4, 3 flow
        steps, 8 tokens): a copy of ``vla_source`` where given (the test session's, exported once), else exported on
        the first call (~40-50 s); reused after: policy.yaml, policy.onnx, tokenizer.json, manifest.json."""
        out = self.root / "vla_policy"
        if not (out / "manifest.json").is_file():
            if self.vla_source is not None:
                shutil.copytree(self.vla_source, out, dirs_exist_ok=True)
            else:
                from vla_small import export, small_policy

                export(small_policy(), out)
        return out


TRAIN_TINY = ["task.num_envs=8", "task.total_steps=256", "agent.num_steps_per_env=8", "agent.actor_hidden_dims=[16]",
              "eval_episodes=2", "logger=none", "checkpoint_interval=2"]
"""Overrides of a run that trains in about a second (4 updates, a checkpoint every 2)."""


def build_good_inputs(root: Path, vla_source: Path | None = None) -> GoodInputs:
    """Make the good inputs under ``root`` (a few seconds: one tiny training run and one recording); ``vla_source``:
    a tests/vla_small.py artifact already exported, copied for :meth:`GoodInputs.vla_artifact` (else it exports)."""
    root.mkdir(parents=True, exist_ok=True)
    robot_yaml = root / "robot.yaml"
    shutil.copy(REPO / "hardware" / "so101" / "robot.yaml", robot_yaml)
    run, dataset = root / "run", root / "dataset"
    for argv in (["train", *TRAIN_TINY, f"hydra.run.dir={run}"],
                 ["record", "--task", "so101_reach", "--out", str(dataset), "--episodes", "2", "--num-envs", "2",
                  "--override", "episode_s=0.5"]):
        done = subprocess.run([sys.executable, "-m", "robot_rl.cli", *argv], capture_output=True, text=True,
                              cwd=root)
        if done.returncode != 0:
            raise RuntimeError(f"building the good inputs: robot-rl {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return GoodInputs(robot_yaml=robot_yaml, run=run, artifact=run / "policy", dataset=dataset, root=root,
                      vla_source=vla_source)


@dataclass(frozen=True)
class FuzzCase:
    """One malformed input and the command that reads it.

    Attributes:
        name: unique, ``<kind>/<what was broken>`` (``robot_yaml/safety.stale_state_timeout=nan``).
        kind: one of :data:`KINDS`.
        make: ``make(case_dir, good) -> argv``: write the malformed input under ``case_dir`` (copy from
            ``good``, never edit ``good``) and return the ``robot-rl`` argv (without ``robot-rl``).
        expect: substrings the error message must contain (file name, key), case-sensitive.
        protect: paths relative to ``case_dir`` whose bytes must not change (a good checkpoint, the
            recorded episodes): "loses nothing".
    """

    name: str
    kind: str
    make: Callable[[Path, GoodInputs], list[str]]
    expect: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()


@dataclass
class Outcome:
    """What one case did: ``verdict`` in clear | vague | silent | traceback | other."""

    name: str
    kind: str
    verdict: str
    rc: int | None
    message: str
    lost: list[str] = field(default_factory=list)


MISSING = object()
"""``set_key``'s value meaning "delete the key"."""


def set_key(data: dict, dotted: str, value: object) -> None:
    """Set (or, with :data:`MISSING`, delete) ``data[a][b]...`` for ``dotted`` = ``a.b`` (list indices as numbers)."""
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(last) if isinstance(node, list) else last
    if value is MISSING:
        del node[key]
    else:
        node[key] = value


def _digest(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), keyed by relative path."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _run_in_process(argv: list[str]) -> tuple[int | None, str, str]:
    """(exit code, printed text, traceback of an exception that escaped main or "")."""
    from robot_rl.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc, escaped = None, ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
            if isinstance(exc.code, str):
                err.write(exc.code)
        except Exception:  # the finding a fuzz run looks for: anything escaping main is a traceback
            escaped = traceback.format_exc()
    return rc, err.getvalue() + out.getvalue(), escaped


def _run_isolated(argv: list[str], cwd: Path) -> tuple[int | None, str, str]:
    """The same in a fresh ``python -m robot_rl.cli`` process (as a user runs it; ~2 s a case)."""
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=600)
    return done.returncode, done.stderr + done.stdout, ""


def run_case(case: FuzzCase, case_dir: Path, good: GoodInputs, isolated: bool = False) -> Outcome:
    """Make ``case``'s input in ``case_dir``, run its argv through ``robot_rl.cli.main``, classify.

    ``isolated=True`` runs the command in its own process instead of this one.
    """
    case_dir.mkdir(parents=True, exist_ok=True)
    argv = [str(a) for a in case.make(case_dir, good)]
    before = {p: _digest(case_dir / p) for p in case.protect if (case_dir / p).exists()}
    rc, message, escaped = _run_isolated(argv, case_dir) if isolated else _run_in_process(argv)
    lost = [p for p, digest in before.items() if not (case_dir / p).exists() or _digest(case_dir / p) != digest]
    verdict = classify(rc, message, escaped, case.expect)
    return Outcome(case.name, case.kind, verdict, rc, (escaped or message).strip()[-2000:], lost)


def classify(rc: int | None, message: str, escaped: str, expect: tuple[str, ...]) -> str:
    """The verdict of one run: traceback, silent (exit 0), clear (exit 2 naming every ``expect``), vague, other."""
    if escaped or "Traceback (most recent call last)" in message:
        return "traceback"
    if rc == 0:
        return "silent"
    if rc == 2:
        return "clear" if all(e in message for e in expect) else "vague"
    return "other"


def corpus() -> list[FuzzCase]:
    """Every case of every ``fuzz_cases_*.py`` module beside this file (names must be unique)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    cases: list[FuzzCase] = []
    for module_path in sorted(TESTS.glob("fuzz_cases_*.py")):
        cases += importlib.import_module(module_path.stem).cases()
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"fuzz case names must be unique: {duplicates}")
    unknown = sorted({c.kind for c in cases} - set(KINDS))
    if unknown:
        raise ValueError(f"fuzz case kinds {unknown} not in {KINDS}")
    return cases
