"""The fuzz layer: every malformed input of the corpus (tests/fuzz_cases_*.py) is refused clearly.

Each case must exit with code 2, name the file and key in its message, print no traceback, and leave
its protected files (a good checkpoint, recorded episodes) byte for byte as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_harness import GoodInputs, build_good_inputs, classify, corpus, run_case

CASES = corpus()


@pytest.fixture(scope="module")
def good(tmp_path_factory, small_vla_artifact) -> GoodInputs:
    return build_good_inputs(tmp_path_factory.mktemp("fuzz_good"), vla_source=small_vla_artifact[1])


def test_classify_on_hand_made_outcomes():
    assert classify(2, "robot.yaml: safety.stale_state_timeout = nan: must be finite", "",
                    ("robot.yaml", "stale_state_timeout")) == "clear"
    assert classify(2, "error: bad value", "", ("robot.yaml",)) == "vague"
    assert classify(0, "trained 256 env steps", "", ()) == "silent"
    assert classify(1, "Traceback (most recent call last):\n  ...", "", ()) == "traceback"
    assert classify(None, "", "Traceback (most recent call last):\nValueError", ("x",)) == "traceback"
    assert classify(2, "Traceback (most recent call last): ... robot.yaml", "", ("robot.yaml",)) == "traceback"
    assert classify(1, "failed", "", ()) == "other"


def test_the_corpus_is_large_and_covers_every_kind():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 100, f"only {len(CASES)} fuzz cases"
    assert kinds == {"robot_yaml", "artifact", "vla_artifact", "checkpoint", "dataset", "config", "cli"}, kinds


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input_is_refused_clearly_and_loses_nothing(case, good: GoodInputs, tmp_path: Path):
    outcome = run_case(case, tmp_path / "case", good)
    assert outcome.verdict == "clear", f"{case.name}: {outcome.verdict} (rc {outcome.rc}):\n{outcome.message}"
    assert not outcome.lost, f"{case.name} changed protected files {outcome.lost}"
