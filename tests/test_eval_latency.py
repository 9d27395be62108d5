"""``robot-rl eval --latency-ms`` and ``benchmarks/latency_tolerance.py``: an artifact evaluated with every command
reaching the motors late (MuJoCo actuator delay), on the committed trained g1_stand_gait and so101_reach_deploy
policies (real sim, real ONNX Runtime)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load

from robot_rl.cli import main
from robot_rl.train.artifact_eval import evaluate_artifact

G1 = Path(__file__).parent / "fixtures" / "policies" / "g1_stand_gait"
REACH = Path(__file__).parent / "fixtures" / "policies" / "so101_reach_deploy"


def test_a_late_command_topples_the_trained_g1():
    """Measured: 16 episodes with pushes last 475 steps on average at 0 ms and 72 at 60 ms (0/16 survive)."""
    on_time = evaluate_artifact(G1, 8, 8, seed=12345, latency_s=0.0)
    late = evaluate_artifact(G1, 8, 8, seed=12345, latency_s=0.06)
    assert on_time["latency_ms"] == 0.0 and late["latency_ms"] == pytest.approx(60.0)
    assert on_time["length_mean"] > 300 and on_time["survival_rate"] >= 0.5
    assert late["length_mean"] < 150 and late["survival_rate"] == 0.0
    assert "latency_ms" not in evaluate_artifact(G1, 1, 1, seed=12345)  # the task's own randomisation


def test_eval_cli_prints_the_latency(capsys):
    assert main(["eval", str(REACH), "--episodes", "2", "--latency-ms", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["latency_ms"] == pytest.approx(5.0)


@pytest.mark.parametrize("bad", ["nan", "-1", "5000", "soon"])
def test_a_bad_latency_is_refused(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(REACH), "--latency-ms", bad])
    assert exc.value.code == 2 and "--latency-ms" in capsys.readouterr().err


def test_a_run_directory_is_told_to_export_first(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("task: {name: so101_reach}\n")
    assert main(["eval", str(tmp_path), "--latency-ms", "5"]) == 2
    assert "robot-rl export" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "checkpoints"), "--latency-ms", "5"]) == 2  # neither a run nor an artifact
    assert "has neither config.yaml" in capsys.readouterr().err


def test_the_benchmark_writes_one_row_per_latency(tmp_path):
    """Measured on these 8 episodes: the reach policy (trained with 0-12 ms) 8/8 at 5 ms, 1/8 at 60, 0/8 at 100."""
    bench = load("latency_tolerance")
    out = tmp_path / "rows.json"
    assert bench.main(["--policy", str(REACH), "--latency-ms", "5", "100", "--episodes", "8", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["latency_ms"], r["metric"], r["n"]) for r in rows] == [(5.0, "success", 8), (100.0, "success", 8)]
    assert rows[0]["k"] >= 6 and rows[0]["ratio_to_first"] == 1.0
    assert rows[1]["k"] <= 1 and rows[1]["ratio_to_first"] <= 1 / 6
    with pytest.raises(SystemExit):
        bench.main(["--policy", str(tmp_path), "--out", str(out)])  # not an artifact


def test_rate_limit_builds_the_task_with_robot_yamls_limit(monkeypatch):
    """``--rate-limit``: the env steps under hardware/so101/robot.yaml's safety.max_step_change (0.1 rad per step), as
    the policy node's safety layer limits each command; without it the task's own (none for so101_reach, the same
    0.1 for so101_reach_deploy, which trains under it)."""
    import sim

    built = []
    make_env = sim.make_env
    monkeypatch.setattr(sim, "make_env", lambda *a, **k: built.append(make_env(*a, **k)) or built[-1])
    limited = evaluate_artifact(REACH, 2, 2, seed=0, task="so101_reach", rate_limit=True)
    free = evaluate_artifact(REACH, 2, 2, seed=0, task="so101_reach")
    own = evaluate_artifact(REACH, 2, 2, seed=0)
    assert limited["max_step_change"] == pytest.approx(0.1) and "max_step_change" not in free | own
    assert built[0].max_step_change == pytest.approx(0.1) and built[1].max_step_change is None
    assert built[2].max_step_change == pytest.approx(0.1)


def test_eval_cli_prints_the_rate_limit_and_refuses_it_for_a_run(tmp_path, capsys):
    assert main(["eval", str(REACH), "--episodes", "2", "--rate-limit"]) == 0
    assert json.loads(capsys.readouterr().out)["max_step_change"] == pytest.approx(0.1)
    (tmp_path / "config.yaml").write_text("task: {name: so101_reach}\n")
    assert main(["eval", str(tmp_path), "--rate-limit"]) == 2
    assert "--rate-limit evaluates a policy artifact" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--task", "so101_reach"], ["--execute-len", "4"]])
def test_eval_cli_refuses_the_other_artifact_only_flags_for_a_run(tmp_path, capsys, flags):
    """``--task`` and ``--execute-len`` change how an artifact is played; a run's evaluation cannot honour them, so it
    refuses them (exit 2, the fix named) rather than ignoring them."""
    (tmp_path / "config.yaml").write_text("task: {name: so101_reach}\n")
    assert main(["eval", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert f"{flags[0]} evaluates a policy artifact" in err and f"robot-rl export {tmp_path}" in err
