"""benchmarks/learner_overhead.py on hand values (no training): the clock, the bound of a perfectly packed
schedule, the ratios and shares, the printed verdicts; and the timed parts of a tiny real training pass."""

from __future__ import annotations

import pytest
from bench_scripts import load, scripted_clock

lo = load("learner_overhead")


def train_row(update_us: float = 40.0, rest_us: float = 10.0) -> dict:
    """A training pass of 1,000 steps in 100 ms: 50 ms in the simulator, 40 ms updating, 10 ms the rest."""
    return {"task": "so101_reach", "num_envs": 8, "steps": 1000, "steps_per_s": 10_000.0, "wall_s": 0.1,
            "cpu_s": 0.15, "sim_wall_s": 0.05, "update_wall_s": 0.04, "rest_wall_s": 0.01,
            "sim_cpu_per_step_us": 100.0, "update_cpu_per_step_us": update_us, "rest_cpu_per_step_us": rest_us}


def test_the_clock_adds_wall_and_cpu_seconds_even_when_the_call_raises(monkeypatch) -> None:
    monkeypatch.setattr(lo, "time", scripted_clock(perf_counter=[1.0, 3.0, 10.0, 10.5],
                                                   process_time=[0.0, 3.5, 5.0, 6.0]))
    clock = lo.Clock()
    assert clock.time(lambda x: x + 1, 1) == 2

    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        clock.time(fails)
    assert (clock.wall, clock.cpu) == pytest.approx((2.5, 4.5))


def test_the_bound_is_the_cores_over_the_cpu_work_of_one_step() -> None:
    # 90 us of simulator CPU + 45 of updates + 15 of the rest = 150 us per step; 2 cores: 2e6 / 150 steps/s
    assert lo.bound(90.0, 45.0, 15.0, 2) == pytest.approx(13_333.33, rel=1e-5)
    assert lo.bound(90.0, 0.0, 0.0, 2) == pytest.approx(22_222.22, rel=1e-5)  # nothing but physics


def test_summary_ratios_shares_and_verdicts() -> None:
    vec = {"steps": 10_000, "steps_per_s": 20_000.0, "cpu_per_step_us": 100.0}
    s = lo.summarise(vec, train_row(), cores=2)
    assert s["training_over_vecenv"] == pytest.approx(0.5)
    assert s["bound_steps_per_s"] == pytest.approx(2e6 / 150)
    assert s["bound_over_vecenv"] == pytest.approx(2e6 / 150 / 20_000)
    assert (s["met"], s["target_within_bound"]) == (False, False)
    assert s["shares"] == pytest.approx({"sim": 0.5, "update": 0.4, "rest": 0.1})
    text = "\n".join(lo.report(vec, train_row(), s, cores=2))
    assert "0.50x (target >= 0.7x: NOT met)" in text and "target is above it on this machine" in text
    cheap = lo.summarise(vec, train_row(update_us=5.0, rest_us=5.0), cores=2)
    assert cheap["target_within_bound"] and "above it" not in "\n".join(lo.report(vec, train_row(), cheap, 2))


def test_the_bound_counts_the_one_thread_passs_learner_work_when_given() -> None:
    # the configured pass updated on 2 threads (80 CPU us/step, spinning included); at 1 thread: 40
    vec = {"steps": 10_000, "steps_per_s": 20_000.0, "cpu_per_step_us": 100.0}
    two, one = train_row(update_us=80.0), {**train_row(update_us=40.0), "steps_per_s": 9_000.0}
    s = lo.summarise(vec, two, cores=2, work=one)
    assert s["bound_steps_per_s"] == pytest.approx(2e6 / 150) and s["training_over_vecenv"] == pytest.approx(0.5)
    text = "\n".join(lo.report(vec, two, s, 2, one))
    assert "training, update at 1 thread" in text and "9,000" in text and "learner 40.0 CPU us/step" in text


def test_the_first_updates_one_time_cost_is_its_excess_over_the_median_update() -> None:
    assert lo.one_time_update_s([2.5, 0.03, 0.028, 0.03, 0.029]) == pytest.approx(2.47)  # compiled: 2.47 s once
    assert lo.one_time_update_s([0.02, 0.03, 0.03]) == 0.0 and lo.one_time_update_s([]) == 0.0


def test_a_compiled_run_reports_its_steady_state_beside_the_all_in_ratio() -> None:
    vec = {"steps": 10_000, "steps_per_s": 20_000.0, "cpu_per_step_us": 100.0}
    # 1,000 steps in 0.1 s, of which 0.02 s were the first update's compilation: steady 1000 / 0.08 s
    row = {**train_row(), "one_time_update_wall_s": 0.02, "steady_steps_per_s": 12_500.0}
    s = lo.summarise(vec, row, cores=2)
    assert s["training_over_vecenv"] == pytest.approx(0.5) and s["steady_over_vecenv"] == pytest.approx(0.625)
    assert not s["steady_met"]
    text = "\n".join(lo.report(vec, {**row, "one_time_update_wall_s": 0.6}, s, cores=2))
    assert "without the first update's one-time 0.6 s (compilation): 12,500 env-steps/s = 0.62x (NOT met" in text
    assert "one-time" not in "\n".join(lo.report(vec, row, s, cores=2))  # under 0.5 s: not worth a line


def test_the_vecenv_figure_is_the_mean_of_the_passes_around_training() -> None:
    before = {"steps": 200_000, "steps_per_s": 20_000.0, "cpu_per_step_us": 100.0}
    after = {"steps": 180_000, "steps_per_s": 18_000.0, "cpu_per_step_us": 110.0}
    assert lo.bracketed(before, after) == pytest.approx({"steps": 380_000, "steps_per_s": 19_000.0,
                                                         "cpu_per_step_us": 105.0})


def test_a_tiny_training_pass_times_its_parts(tmp_path) -> None:
    row = lo.training_pass(["task=so101_reach", "task.num_envs=4", "agent.num_steps_per_env=4",
                            "agent.num_mini_batches=2", "agent.num_learning_epochs=1"], 64, tmp_path / "run")
    assert row["steps"] == 64 and row["num_envs"] == 4
    assert row["sim_wall_s"] > 0 and row["update_wall_s"] > 0 and row["rest_wall_s"] >= 0
    assert row["sim_wall_s"] + row["update_wall_s"] + row["rest_wall_s"] == pytest.approx(row["wall_s"])
    assert row["updates"] == 4 and row["first_update_wall_s"] > 0 and row["one_time_update_wall_s"] >= 0
    assert row["steady_steps_per_s"] >= row["steps_per_s"]
    vec = lo.vecenv_pass("so101_reach", 4, seconds=0.05)
    assert vec["steps"] > 0 and vec["steps"] % 4 == 0 and vec["cpu_per_step_us"] > 0


def test_a_bad_override_exits_2_before_any_pass(monkeypatch, capsys) -> None:
    monkeypatch.setattr(lo.sys, "argv", ["learner_overhead.py", "agent.nope=1"])
    monkeypatch.setattr(lo, "in_fresh_process", lambda *a: pytest.fail("a pass started"))
    with pytest.raises(SystemExit) as exc:
        lo.main()
    assert exc.value.code == 2 and "agent.nope" in capsys.readouterr().err
