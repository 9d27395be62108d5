"""Load a script of ``benchmarks/`` as a module (they are scripts, not a package), and a scripted clock.

``benchmarks/`` goes on ``sys.path`` first, as it is when the script runs (``python benchmarks/x.py``),
so the scripts' shared ``_results`` helper imports the same way in both.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as module ``bench_<name>`` (loaded once per test session)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    key = f"bench_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def scripted_clock(**sequences: list[float]) -> SimpleNamespace:
    """Stand-in for the ``time`` module in a benchmark's tests: each named function (``monotonic``,
    ``process_time``, ...) returns the next value of its sequence, whatever its arguments."""
    def reader(values: list[float]):
        it = iter(values)
        return lambda *_: next(it)

    return SimpleNamespace(**{name: reader(values) for name, values in sequences.items()})
