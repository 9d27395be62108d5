"""benchmarks/vla_target_probe.py and vla_keypoint_precision.py end to end on a tiny real recording: every arm
trains, is scored on held-out frames, and the rows say what was measured."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from bench_scripts import load

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.recorder import expert_policy, record

probe = load("vla_target_probe")
precision = load("vla_keypoint_precision")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe") / "reach_lang"
    record("so101_reach_lang", expert_policy, root, 3, None, num_envs=3, seed=0,
           overrides={"episode_s": 0.4, "cameras": ["front", "top"], "image_size": 32})
    return root


@pytest.mark.render
def test_the_probe_scores_every_encoder_on_held_out_first_frames(data: Path, tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    out = tmp_path / "probe.json"
    probe.main(["--dataset", str(data), "--holdout", "1", "--minutes", "0.02", "--out", str(out)])
    result = json.loads(out.read_text())
    assert [r["arm"] for r in result["rows"]] == list(probe.ARMS)
    assert result["chance_held_out_median_cm"] > 0
    assert result["train_episodes"] == 2 and result["meta"]["command"].startswith("python benchmarks/vla_target_probe")
    for row in result["rows"]:
        assert row["steps"] >= 1 and row["held_out_episodes"] == 1
        assert math.isfinite(row["held_out_median_cm"]) and 0 <= row["held_out_within_2cm"] <= 1
    conv, *_, linear = result["rows"]
    assert linear["readout"] == "linear" and linear["trainable_parameters"] < conv["trainable_parameters"]


@pytest.mark.render
def test_keypoint_precision_scores_each_head_in_pixels_per_camera(data: Path, tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    out = tmp_path / "precision.json"
    precision.main(["--dataset", str(data), "--holdout", "1", "--minutes", "0.01", "--arms", "stride4_1x1",
                    "stride2_3x3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["command"].startswith("python benchmarks/vla_keypoint_precision")
    coarse, fine = result["rows"]
    assert (coarse["stride"], coarse["kernel"], fine["stride"], fine["kernel"]) == (4, 1, 2, 3)
    assert fine["trainable_parameters"] > coarse["trainable_parameters"]  # a 3x3 kernel on 16 channels
    start, stop = LeRobotDataset(data).episode_range(2)  # the held-out episode
    for row in result["rows"]:
        assert row["steps"] >= 1 and row["image_size"] == 32 and row["held_out_frames"] == stop - start > 0
        for cam in ("front", "top"):
            assert 0 <= row[cam]["median_px"] <= row[cam]["p90_px"] <= 32 * 1.5 and row[cam]["centre_median_px"] > 0
