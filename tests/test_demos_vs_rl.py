"""``benchmarks/demos_vs_rl.py``: a run writes its curve after every evaluation; partial runs merge and report.

The first test trains the real ``sac`` arm on the real so101_lift env for 64 env steps (one recorded expert
episode for the demo probe); the others feed the reporting functions hand-written curves, since what they
check is the arithmetic of the issue's ratio, not training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load
from expert_demos import record_expert_demos

pytestmark = pytest.mark.usefixtures("one_thread")

bench = load("demos_vs_rl")


def test_run_arm_rewrites_its_run_file_after_every_evaluation(tmp_path: Path, monkeypatch) -> None:
    demos = record_expert_demos(tmp_path / "lift", "so101_lift", 1, 1, 1, only_success=True)
    snapshots: list[tuple[int, bool]] = []
    write = bench.write_json

    def spy(path: Path, data: dict) -> None:
        snapshots.append((len(data["curve"]), data["done"]))
        write(path, data)

    monkeypatch.setattr(bench, "write_json", spy)
    run_file = tmp_path / "runs_sac_seed0.json"
    common = {"learning_starts": 32, "utd_ratio": 1.0, "init_alpha": 0.05, "n_step": 1, "backup_entropy": False}
    result = bench.run_arm("sac", "so101_lift", str(demos), 64, 0, 2, 32, 2, common, {}, str(run_file))
    assert [s for s, _ in result["curve"]] == [0, 32, 64]
    assert snapshots == [(1, False), (2, False), (3, True)]  # written at each evaluation, done at the last
    saved = json.loads(run_file.read_text())
    assert saved["curve"] == [list(point) for point in result["curve"]] and saved["done"]
    assert [sorted(probe) for probe in saved["probes"]][-1] == sorted(
        ["env_steps", "updates", "q_demo", "actor_mse", "train_episodes", "train_successes"])
    assert not list(tmp_path.glob("*.tmp"))


def test_merge_reads_run_files_and_curves_json_and_means_only_shared_steps(tmp_path: Path) -> None:
    partial = {"arm": "sac", "seed": 2, "curve": [[0, 0.0], [10, 0.25]], "probes": [], "wall_s": 1.0,
               "cpu_s": 1.0, "done": False}
    full = {"arm": "sac", "seed": 0, "curve": [[0, 0.0], [10, 0.5], [20, 0.75]], "probes": [], "wall_s": 1.0,
            "cpu_s": 1.0, "done": True}
    (tmp_path / "run.json").write_text(json.dumps(partial))
    (tmp_path / "curves.json").write_text(json.dumps({"results": [full], "bc": [{"seed": 0, "success": 0.4}]}))
    results, bc = bench.load_merged([tmp_path / "run.json", tmp_path / "curves.json"])
    assert [(r["seed"], r["done"]) for r in results] == [(2, False), (0, True)] and bc[0]["success"] == 0.4
    assert bench.mean_curve([r["curve"] for r in results]) == [(0, 0.0), (10, 0.375)]
    (tmp_path / "other.json").write_text(json.dumps({"steps": 3}))
    with pytest.raises(SystemExit, match=r"other\.json: neither a curves\.json"):
        bench.load_merged([tmp_path / "other.json"])


def test_report_gives_the_ratio_at_pure_rls_best_success_and_says_when_it_is_zero(capsys) -> None:
    sac = {"arm": "sac", "seed": 0, "curve": [[0, 0.0], [10000, 0.1], [20000, 0.3], [30000, 0.2]], "cpu_s": 9.0,
           "done": False}
    demo = {"arm": "rlpd_bc", "seed": 0, "curve": [[0, 0.2], [2000, 0.25], [4000, 0.35]], "cpu_s": 9.0}
    zero = [{**sac, "seed": 1, "curve": [[0, 0.0], [10000, 0.0]]}, {**demo, "seed": 1}]
    bench.report([sac, demo, *zero], [])
    out = capsys.readouterr().out
    assert "sac seed 0 (stopped early, 9 s CPU): 0:0.000 10000:0.100 20000:0.300 30000:0.200" in out
    assert "seed 0: sac's best success 0.300 first at 20000 env steps; rlpd_bc reaches it at 4000: ratio 0.200" in out
    assert "seed 1: sac's success is 0 at every evaluation up to 10000 env steps" in out


def test_merge_only_cli_takes_this_order_skips_and_refuses_bad_skip(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = Path(bench.__file__)
    longer = {"arm": "sac", "seed": 0, "curve": [[0, 0.0], [20, 0.0]], "probes": [], "wall_s": 1.0, "cpu_s": 2.0,
              "done": False}
    earlier = {"results": [{**longer, "curve": [[0, 0.0], [10, 0.0]], "done": True},
                           {**longer, "seed": 2, "curve": [[0, 0.0], [10, 0.0]], "done": True},
                           {**longer, "arm": "rlpd_bc", "curve": [[0, 0.5], [10, 0.5]], "done": True}],
               "bc": [{"seed": 0, "success": 0.25}]}
    (tmp_path / "run.json").write_text(json.dumps(longer))
    (tmp_path / "curves.json").write_text(json.dumps(earlier))
    cmd = [sys.executable, str(script), "--seeds", "", "--merge", str(tmp_path / "run.json"),
           str(tmp_path / "curves.json"), "--out", str(tmp_path / "out")]
    done = subprocess.run([*cmd, "--skip", "sac:2"], capture_output=True, text=True, check=True)
    merged = json.loads((tmp_path / "out" / "curves.json").read_text())["rows"]
    assert [(r["arm"], r["seed"], r["curve"][-1][0]) for r in merged] == [("sac", 0, 20), ("rlpd_bc", 0, 10)]
    assert "seed 0: sac's success is 0 at every evaluation up to 20 env steps" in done.stdout
    bad = subprocess.run([*cmd, "--skip", "sac2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--skip 'sac2': give ARM:SEED" in bad.stderr
