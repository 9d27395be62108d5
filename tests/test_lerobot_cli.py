"""``robot-rl dataset info|stats|plot`` on the LeRobot-written fixture and on a damaged copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lerobot_fixtures import REACH_TINY
from PIL import Image

from robot_rl.cli import main

FIXTURE = REACH_TINY


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    if not FIXTURE.is_dir():
        pytest.fail(f"LeRobot fixture not found at {FIXTURE} (tests/fixtures/lerobot_v3, or $ROBOT_RL_FIXTURES)")
    dst = tmp_path / "so101_reach_tiny"
    shutil.copytree(FIXTURE, dst)
    for path in dst.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def test_info_prints_totals_tasks_and_episode_table(fixture_copy: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["dataset", "info", str(fixture_copy)]) == 0
    out = capsys.readouterr().out
    assert "episodes    3   frames 96" in out and "structure   OK" in out
    assert "reach the blue target" in out and "1.33-2.17s" in out
    assert "shoulder_pan.pos, shoulder_lift.pos" in out


def test_stats_prints_lerobots_numbers(fixture_copy: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["dataset", "stats", str(fixture_copy), "--key", "action"]) == 0
    out = capsys.readouterr().out
    # meta/stats.json of the fixture: action min/mean of shoulder_pan are -30.0348..., 0.453355...
    assert "shoulder_pan.pos   -30.035  29.971  0.45336" in out


def test_stats_rewrite_rebuilds_a_broken_stats_file(fixture_copy: Path, capsys: pytest.CaptureFixture) -> None:
    original = (fixture_copy / "meta/stats.json").read_text()
    (fixture_copy / "meta/stats.json").write_text("{not json")
    assert main(["dataset", "info", str(fixture_copy)]) == 2
    assert "--rewrite" in capsys.readouterr().err
    assert main(["dataset", "stats", str(fixture_copy), "--rewrite", "--key", "action"]) == 0
    assert "0.45336" in capsys.readouterr().out
    assert len((fixture_copy / "meta/stats.json").read_text()) > len(original) // 2


def test_plot_writes_one_png_per_numeric_feature(fixture_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    assert main(["dataset", "plot", str(fixture_copy), "--episodes", "0", "2", "--out", str(out)]) == 0
    written = sorted(p.name for p in out.glob("*.png"))
    assert written == ["action.png", "next.reward.png", "observation.state.png"]
    width, height = Image.open(out / "action.png").size
    assert width > 800 and height > 300  # 2 x 3 joint subplots


def test_bad_arguments_fail_with_a_message(fixture_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["dataset", "info", str(tmp_path / "missing")]) == 2
    assert "is not a LeRobot dataset" in capsys.readouterr().err
    assert main(["dataset", "plot", str(fixture_copy), "--episodes", "7"]) == 2
    assert "episode 7 out of range" in capsys.readouterr().err
    assert main(["dataset", "stats", str(fixture_copy), "--key", "nope"]) == 2
    assert "no statistics for ['nope']" in capsys.readouterr().err
