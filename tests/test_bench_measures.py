"""The summaries of the measuring benchmarks, on hand-made measurements (nothing is timed or trained).

``sim_throughput`` (one measurement, the best of interleaved rounds, the rows), ``dataset_io`` (best of
repeats, ratio to the sim rate), ``deploy_latency`` (percentiles, jitter and CPU shares pooled over runs),
``sim2sim_transfer`` (the ROS/training ratio and its interval) and ``world_model_vs_model_free`` (curve
labels and seed means). Every expected figure is computed by hand.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from bench_scripts import load, scripted_clock

throughput = load("sim_throughput")
dataset_io = load("dataset_io")
latency = load("deploy_latency")
transfer = load("sim2sim_transfer")
wm = load("world_model_vs_model_free")


def test_throughput_measure_times_after_the_warm_up_until_the_minimum_time(monkeypatch) -> None:
    ks = []
    monkeypatch.setattr(throughput, "time", scripted_clock(perf_counter=[0.0, 0.4, 0.8, 1.2]))
    monkeypatch.setattr(throughput, "cpu_seconds", scripted_clock(cpu=[10.0, 10.5]).cpu)  # 0.5 CPU s timed
    rate = throughput.measure(lambda k: ks.append(k), num_envs=4, min_seconds=1.0, warmup=2, pids=[])
    assert ks == [0, 1, 0, 1, 2]  # 2 warm-up steps, then 3 timed ones (1.2 s >= 1 s)
    assert (rate.wall, rate.cpu) == pytest.approx((3 * 4 / 1.2, 3 * 4 / 0.5))  # env-steps per wall / CPU second


def test_throughput_keeps_the_best_wall_and_cpu_rate_of_the_interleaved_rounds(monkeypatch) -> None:
    Rate = throughput.Rate
    calls = []
    rates = iter([Rate(100.0, 50.0), Rate(200.0, None), Rate(150.0, 40.0), Rate(180.0, 90.0)])

    def fake_measure(step, num_envs, seconds, warmup, pids):
        calls.append((step, warmup))
        return next(rates)

    monkeypatch.setattr(throughput, "measure", fake_measure)
    args = argparse.Namespace(repeats=2, seconds=1.0, warmup=5)
    best = throughput.measure_all({"vec": "v", "batch": "b"}, {}, 64, args)
    assert calls == [("v", 5), ("b", 5), ("v", 1), ("b", 1)]  # interleaved; full warm-up in the first round only
    assert best == {"vec": Rate(150.0, 50.0), "batch": Rate(200.0, 90.0)}
    rows = throughput.flat_rows([("so101_reach", 64, {**best, "sync": Rate(30.0, None)})])
    assert [(r["variant"], r["vec_over_this_wall"], r["vec_over_this_cpu"]) for r in rows] == [
        ("vec", 1.0, 1.0), ("batch", 0.75, 50.0 / 90.0), ("sync", 5.0, None)]
    assert rows[0]["task"] == "so101_reach" and rows[0]["envs"] == 64 and rows[2]["steps_per_cpu_s"] is None


def test_dataset_io_takes_the_best_repeat_and_divides_by_the_sim_rate() -> None:
    best = dataset_io.best_of([{"open_s": 0.5, "getitem": 100.0, "episode": 900.0},
                               {"open_s": 0.3, "getitem": 80.0, "episode": 1000.0}])
    assert best == {"open_s": 0.3, "getitem": 100.0, "episode": 1000.0}  # shortest open, highest rates
    rows = dataset_io.summary([("sim step", 2000.0), ("write state-only (frames/s)", 500.0)], 2000.0)
    assert [r["x_sim_step_rate"] for r in rows] == [1.0, 0.25]
    assert rows[1] == {"measurement": "write state-only (frames/s)", "frames_per_s": 500.0, "x_sim_step_rate": 0.25}


def _run(latency_ms: list[float], period_ms: list[float], wall: float, cpu: float, load: tuple) -> dict:
    samples = np.array(latency_ms)
    return {"latency_ms": samples, "receive_ms": samples / 2, "compute_ms": samples / 4, "inference_ms": samples / 8,
            "period_ms": np.array(period_ms), "wall_s": wall, "cpu_policy_s": cpu, "cpu_sim_s": 2 * cpu, "load": load}


def test_deploy_latency_pools_every_runs_samples() -> None:
    runs = [_run([1.0, 2.0, 3.0, math.nan], [20.0, 22.0], 10.0, 1.0, (1.0, 3.0)),
            _run([4.0], [21.0, math.nan], 20.0, 2.0, (4.0, 4.0))]
    out = latency.pooled(runs)
    # finite latencies 1, 2, 3, 4: median 2.5, 99th percentile 3 + 0.97 (linear interpolation), max 4
    assert (out["latency_ms_p50"], out["latency_ms_p99"], out["latency_ms_max"]) == pytest.approx((2.5, 3.97, 4.0))
    assert out["receive_ms_p50"] == pytest.approx(1.25)
    # periods 20, 22, 21: mean 21, std sqrt(2/3), worst deviation from the 20 ms period (not the mean): 2
    assert (out["period_mean"], out["period_std"], out["period_worst"]) == pytest.approx((21.0, math.sqrt(2 / 3), 2.0))
    assert out["cpu_policy_pct"] == pytest.approx(10.0) and out["cpu_sim_pct"] == pytest.approx(20.0)  # 3 s, 6 s / 30
    assert out["commands"] == 5 and out["load"] == pytest.approx(3.0)  # mean of each run's (start + end) / 2


def test_sim2sim_ratio_and_its_katz_interval() -> None:
    # (40/50) / (45/50) = 0.889; half width 1.96 * sqrt(1/40 - 1/50 + 1/45 - 1/50) = 0.1666 on the log scale
    assert transfer.ratio_interval(40, 50, 45, 50) == pytest.approx((0.8889, 0.7525, 1.0500), abs=1e-4)
    # an empty cell adds 0.5 to every count (1 to n): (0.5/11) / (5.5/11)
    assert transfer.ratio_interval(0, 10, 5, 10)[0] == pytest.approx(1 / 11)
    assert transfer.rate(45, 50) == "45/50 = 90.0% [78.6-95.7]"  # Wilson 95% interval


def test_sim2sim_rate_limit_override_parameters() -> None:
    assert transfer.rate_limit_params(0.0) == {}  # robot.yaml's limit
    assert transfer.rate_limit_params(0.3) == {"max_step_change": "[0.3]"}  # one value: every joint
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="--max-step-change"):
            transfer.rate_limit_params(bad)


def test_world_model_labels_and_seed_mean_curves() -> None:
    runs = [{"arm": "sac", "seed": 0, "curve": [[0, 1.0], [10, 3.0]]},
            {"arm": "sac", "seed": 1, "curve": [[0, 3.0], [10, 5.0]]},
            {"arm": "tdmpc", "seed": 0, "value_head": None, "curve": [[0, 0.0], [10, 10.0]]},
            {"arm": "tdmpc", "seed": 0, "value_head": "two_hot", "td_encoder": "online",
             "curve": [[0, 2.0], [10, 4.0]]}]
    assert [wm.label(r) for r in runs[1:]] == ["sac", "tdmpc (scalar)", "tdmpc (two_hot, online encoder)"]
    steps, means = wm.mean_curves(runs)
    assert steps == [0, 10]
    assert means == {"tdmpc (scalar)": [0.0, 10.0], "tdmpc (two_hot, online encoder)": [2.0, 4.0], "sac": [2.0, 4.0]}
    assert list(means)[-1] == "sac"  # tdmpc first: ARMS order


def test_g1_stand_curve_keeps_updates_with_finished_episodes(tmp_path) -> None:
    g1 = load("g1_stand_survival")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 10, "train/kl": 0.1}\n'
                       '{"step": 20, "episode/survival": 0.25, "episode/length": 250.0, "episode/return": 3.0}\n')
    assert g1.curve_rows(metrics) == [{"step": 20, "survival": 0.25, "length_s": 5.0, "return": 3.0}]
    svg = g1.curve_svg(g1.curve_rows(metrics), "t")
    assert svg.startswith("<svg") and svg.count("<polyline") == 2


@pytest.mark.robot_assets("unitree_g1")
def test_transfer_rates_success_for_tasks_with_a_success_rule_and_survival_for_locomotion() -> None:
    assert transfer.task_metric("so101_reach_deploy") == "success"
    assert transfer.task_metric("so101_lift") == "success"
    assert transfer.task_metric("g1_stand") == "survival"


def test_g1_walk_tracking_sums_only_live_steps_against_hand_values() -> None:
    walk = load("g1_walk_tracking")
    sums = walk.Tracking.zeros(2)
    command = torch.tensor([[0.3, 0.4, 0.5], [1.0, 0.0, -0.2]])
    # env 0 moves at (0, 0.4): error 0.3; yaw 0.1 -> 0.4. env 1 is no longer live: not counted
    sums.add(torch.tensor([True, False]), command, torch.tensor([[0.0, 0.4], [9.0, 9.0]]), torch.tensor([0.1, 5.0]))
    sums.add(torch.tensor([True, True]), command, command[:, :2], command[:, 2])  # exact tracking: error 0
    s = sums.summary()
    assert s["steps"] == 3
    assert s["lin_vel_error"] == pytest.approx(0.3 / 3) and s["yaw_rate_error"] == pytest.approx(0.4 / 3)
    assert s["lin_vel_error_standing_still"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert s["yaw_rate_error_standing_still"] == pytest.approx((0.5 + 0.5 + 0.2) / 3)
    assert s["yaw_rate_mean"] == pytest.approx((0.1 + 0.5 - 0.2) / 3)
    # pairs (commanded, measured) counted: vx (0.3, 0.0), (0.3, 0.3), (1.0, 1.0): slope by hand
    c, m = torch.tensor([0.3, 0.3, 1.0]), torch.tensor([0.0, 0.3, 1.0])
    want = float(((c - c.mean()) * (m - m.mean())).sum() / ((c - c.mean()) ** 2).sum())
    assert s["slope_vx"] == pytest.approx(want)
    # yaw (0.5, 0.1), (0.5, 0.5), (-0.2, -0.2): slope by hand
    c, m = torch.tensor([0.5, 0.5, -0.2]), torch.tensor([0.1, 0.5, -0.2])
    assert s["slope_yaw_rate"] == pytest.approx(float(((c - c.mean()) * (m - m.mean())).sum()
                                                       / ((c - c.mean()) ** 2).sum()))
    # an axis never commanded (vy always 0 here) has no slope to fit: None (JSON null), not NaN
    still = walk.Tracking.zeros(1)
    for vx in (0.2, 0.6):
        still.add(torch.tensor([True]), torch.tensor([[vx, 0.0, 0.1]]), torch.tensor([[vx, 0.05]]), torch.tensor([0.1]))
    s = still.summary()
    assert s["slope_vx"] == pytest.approx(1.0) and s["slope_vy"] is None and s["slope_yaw_rate"] is None


@pytest.mark.robot_assets("unitree_g1")
def test_g1_walk_tracking_runs_an_artifact_to_the_end_of_every_episode() -> None:
    walk = load("g1_walk_tracking")
    artifact = Path(__file__).parent / "fixtures" / "policies" / "g1_stand"  # a policy that stands: it falls here
    row = walk.evaluate_tracking(artifact, episodes=2, seed=0, pushes=((5.0, 8.0), 0.5))
    assert row["episodes"] == 2 and 0.0 <= row["survival_rate"] <= 1.0
    assert 0 < row["steps"] <= 2 * 1000 and row["lin_vel_error"] > 0 and row["lin_vel_error_standing_still"] >= 0


def test_g1_benchmarks_refuse_a_run_without_an_artifact_and_a_bad_count(tmp_path, capsys) -> None:
    g1 = load("g1_stand_survival")
    with pytest.raises(SystemExit) as exit_info:
        g1.run_args([str(tmp_path)], "doc", tmp_path / "out.json")
    assert exit_info.value.code == 2 and "no exported artifact there" in capsys.readouterr().err
    (tmp_path / "policy").mkdir()
    with pytest.raises(SystemExit):
        g1.run_args([str(tmp_path), "--episodes", "0"], "doc", tmp_path / "out.json")
    assert "--episodes 0: must be >= 1" in capsys.readouterr().err
    assert g1.run_args([str(tmp_path)], "doc", tmp_path / "out.json").out == tmp_path / "out.json"
    for bad in ("0", "-0.1", "nan", "inf"):
        with pytest.raises(SystemExit):
            g1.run_args([str(tmp_path), "--max-step-change", bad], "doc", tmp_path / "out.json")
        assert f"--max-step-change {float(bad)}: must be a finite number > 0" in capsys.readouterr().err


def test_g1_evaluation_control_is_the_runs_own_or_the_given_rate_limit(tmp_path) -> None:
    g1 = load("g1_stand_survival")
    (tmp_path / "config.yaml").write_text("task:\n  name: g1_stand_gait\n  env: {}\n")
    assert g1.evaluation_control(tmp_path, None) == {}
    assert g1.evaluation_control(tmp_path, 0.15) == {"max_step_change": 0.15}
    (tmp_path / "config.yaml").write_text("task:\n  name: g1_stand_gait\n  env:\n    control:\n"
                                          "      action_scale: 1.0\n      max_step_change: 0.15\n")
    assert g1.evaluation_control(tmp_path, None) == {"action_scale": 1.0, "max_step_change": 0.15}
    assert g1.evaluation_control(tmp_path, 0.3) == {"action_scale": 1.0, "max_step_change": 0.3}


def test_g1_run_task_reads_the_runs_task_and_its_episode_length(tmp_path) -> None:
    g1 = load("g1_stand_survival")
    (tmp_path / "config.yaml").write_text("task:\n  name: g1_walk\n  env: {}\n")
    assert g1.run_task(tmp_path) == ("g1_walk", 20.0)
    (tmp_path / "config.yaml").write_text("task:\n  name: g1_stand\n  env:\n    episode_s: 12.0\n")
    assert g1.run_task(tmp_path) == ("g1_stand", 12.0)
    (tmp_path / "config.yaml").write_text("task:\n  name: g1_walk_gait\n  env: {}\n")
    assert g1.run_task(tmp_path) == ("g1_walk_gait", 20.0)
    # a gait-clock policy observes its clock: evaluated on the gait variant of the standing or walking task
    assert [g1.evaluation_task(t, "stand") for t in ("g1_walk", "g1_stand_gait", "g1_walk_gait")] == \
        ["g1_stand", "g1_stand_gait", "g1_stand_gait"]
    assert g1.evaluation_task("g1_stand", "walk") == "g1_walk"
    (tmp_path / "config.yaml").write_text("task:\n  name: so101_reach\n  env: {}\n")
    with pytest.raises(SystemExit, match=r"task\.name = 'so101_reach'"):
        g1.run_task(tmp_path)
