"""The policy node's statistics as a benchmark row and as sim2sim's line (robot_rl/deploy/node_report.py)."""

from __future__ import annotations

import math

from robot_rl.deploy.node_report import describe, node_counts

VLA_STATS = {"commands": 500, "rate_limited": 120, "inferences": 63, "latency_p50_ms": 2.0, "latency_p99_ms": 15.25,
             "image_age_p50_ms": 53.0, "image_age_p99_ms": 62.5, "image_age_max_ms": 80.0}


def test_rows_keep_the_nodes_counts_and_camera_frame_age() -> None:
    assert node_counts(VLA_STATS) == {
        "node_commands": 500, "node_inferences": 63, "node_rate_limited": 120, "node_clamped": 0, "node_vla_hold": 0,
        "node_watchdog_ticks": 0, "node_stale": 0, "image_age_p50_ms": 53.0, "image_age_p99_ms": 62.5,
        "image_age_max_ms": 80.0}
    no_camera = node_counts({"commands": 10})  # a proprioceptive policy: no frame age
    assert no_camera["node_commands"] == 10 and math.isnan(no_camera["image_age_p50_ms"])


def test_the_line_names_latency_safety_interventions_and_frame_age() -> None:
    line = describe(VLA_STATS)
    assert "latency 2.00 / 15.25 ms" in line and "120 of 500 commands rate-limited (24%)" in line
    assert "63 inferences" in line and "camera frames 53 / 62 ms (p50 / p99) behind the joint state" in line
    assert "control step" not in line  # no rate given: no step count
    assert "= 1 control step at p50 (robot-rl eval --image-lag)" in describe(VLA_STATS, control_hz=25.0)  # 53/40
    assert "= 3 control steps at p50" in describe(VLA_STATS, control_hz=50.0)  # 53 ms / 20 ms = 2.65
    vector = describe({"commands": 200, "latency_p50_ms": 1.5, "latency_p99_ms": 3.0, "clamped": 2})
    assert "0 of 200 commands rate-limited (0%) and 2 clamped" in vector and "camera" not in vector
    assert "stale" not in vector  # said only where the node held on a stale state
    held = describe({"commands": 112, "inferences": 109, "stale": 3})
    assert "109 inferences" in held and "3 ticks held the last command on a stale joint state (no inference)" in held
    assert describe({}) == "policy node: no statistics (it wrote no stats_file)"
