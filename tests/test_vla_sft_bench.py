"""benchmarks/vla_sft.py: the results table from hand-made rows (success, interval, target, per colour, control)."""

from __future__ import annotations

import pytest
from bench_scripts import load

bench = load("vla_sft")


def summary(rate: float, ci: list[float], per: dict[str, float]) -> dict:
    by_target = {k: {"episodes": 25, "success_rate": v, "success_ci95": [0, 1]} for k, v in per.items()}
    return {"episodes": 100, "success_rate": rate, "success_ci95": ci, "success_by_target": by_target}


def test_the_table_puts_success_beside_its_target_and_the_wrong_instruction_beside_chance() -> None:
    row = {"task": "so101_reach_lang", "cameras": ["front", "top"], "agent": ["lr=1e-3"], "demos": 100,
           "train_wall_s": 1500.0,
           "gradient_steps": 7000, "target": 0.7, "chance": 0.25,
           "named": summary(0.74, [0.647, 0.815], {"red": 0.8, "blue": 0.68}),
           "wrong_instruction": summary(0.12, [0.07, 0.2], {"red": 0.1, "blue": 0.14})}
    meta = {"command": "python benchmarks/vla_sft.py", "commit": "abc", "load_average": {"start": 1.0, "end": 2.0},
            "date": "2026-12-01T21:00:00+00:00"}
    text = bench.table([row], [meta])
    line = next(x for x in text.splitlines() if x.startswith("| so101_reach_lang"))
    assert ("| front + top | lr=1e-3 | 100 | 25.0 min | 7000 | 74% [65-82] (>= 70%) over 100 | red 80%, blue 68% "
            "| 12% [7-20] (25%) |" in line)
    assert "- Command: `python benchmarks/vla_sft.py`; commit abc" in text


def test_a_dart_row_names_its_recording_noise() -> None:
    assert bench.dataset_name("so101_reach_lang", 100, 0.0) == "reach_lang_100"
    assert bench.dataset_name("so101_reach_lang", 100, 0.02) == "reach_lang_100_noise0.02"
    row = {"task": "so101_reach_lang", "cameras": ["front", "top"], "agent": [], "demos": 100, "record_noise": 0.02,
           "train_wall_s": 60.0, "gradient_steps": 10, "target": 0.7, "chance": 0.25,
           "named": summary(0.5, [0.4, 0.6], {}), "wrong_instruction": summary(0.0, [0.0, 0.04], {})}
    line = next(x for x in bench.table([row], []).splitlines() if x.startswith("| so101_reach_lang"))
    assert "| - | 100 (DART 0.02) | 1.0 min |" in line


def test_dart_recording_executes_noisy_actions_and_stores_the_experts_clean_ones(tmp_path) -> None:
    """What ``--record-noise`` relies on: ``randomization.action_noise_std`` perturbs the action the actuators get
    (the recorded states differ from a clean recording of the same seed) while the dataset stores the expert's
    action, identical at the shared first state."""
    import numpy as np

    from robot_rl.data.lerobot import LeRobotDataset
    from robot_rl.demos.recorder import expert_policy, record

    data = {}
    for name, noise in (("clean", 0.0), ("dart", 0.05)):
        record("so101_reach", expert_policy, tmp_path / name, 1, None, num_envs=1, seed=3,
               overrides={"episode_s": 0.5, "randomization": {"action_noise_std": noise}})
        ds = LeRobotDataset(tmp_path / name)
        data[name] = {k: np.asarray(ds.column(k)) for k in ("observation.state", "action.policy")}
    clean, dart = data["clean"], data["dart"]
    np.testing.assert_array_equal(clean["observation.state"][0], dart["observation.state"][0])
    np.testing.assert_allclose(clean["action.policy"][0], dart["action.policy"][0], atol=1e-6)
    assert np.abs(clean["observation.state"][1:] - dart["observation.state"][1:]).max() > 1e-3
    assert np.abs(dart["action.policy"]).max() <= 1.0


def test_record_noise_must_be_a_finite_standard_deviation() -> None:
    import argparse

    import pytest

    assert bench.noise_std("0.02") == 0.02 and bench.noise_std("0") == 0.0
    for bad in ("-0.1", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="standard deviation"):
            bench.noise_std(bad)


def test_eval_only_reads_the_training_wall_from_the_runs_log(tmp_path) -> None:
    """``--eval-only``: the train command's last ``trained ... in S s`` line of the run's log; none: a clear exit."""
    log = tmp_path / "run.log"
    log.write_text("$ nice -n 5 robot-rl train ...\ntrained 4,000 gradient steps in 12 s (80 updates)\n"
                   "trained 24,000 gradient steps in 775 s (480 updates)\n$ nice -n 5 robot-rl eval ...\n")
    assert bench.trained_seconds(log) == 775.0
    log.write_text("$ nice -n 5 robot-rl train ...\n")
    with pytest.raises(SystemExit, match="did not finish training"):
        bench.trained_seconds(log)
