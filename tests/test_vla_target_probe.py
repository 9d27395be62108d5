"""benchmarks/vla_target_probe.py end to end on a tiny real recording: every encoder trains, is scored on held-out
first frames, and the rows say what was measured."""

from __future__ import annotations

import json
import math

import pytest
from bench_scripts import load

from robot_rl.demos.recorder import expert_policy, record

probe = load("vla_target_probe")


@pytest.mark.render
def test_the_probe_scores_every_encoder_on_held_out_first_frames(tmp_path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    data = tmp_path / "reach_lang"
    record("so101_reach_lang", expert_policy, data, 3, None, num_envs=3, seed=0,
           overrides={"episode_s": 0.4, "cameras": ["front", "top"], "image_size": 32})
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
