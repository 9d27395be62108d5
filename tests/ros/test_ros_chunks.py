"""The policy node plays a chunked artifact the way policy.yaml's ``chunk_execution`` says, over real DDS.

The policy ignores its observation and always returns the chunk ``raw_k = 0.1 k`` (``k = 0..3``, every
joint), so the commanded targets show how chunks are played: open loop with ``execute_len = 2`` repeats
``raw_0, raw_1``; temporal ensembling (ACT's weights, the oldest prediction first) holds one hand-computed value.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ros_support import Nodes, Probe, fresh_domain_id

from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.export import PolicyHead, export_policy, make_meta
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
JOINTS = ROBOT.joint_names
DEFAULT = np.array([j.default for j in ROBOT.joints])
H, SCALE = 4, 0.5


def constant_chunk_net() -> torch.nn.Module:
    """obs ``[B, 18]`` -> raw chunk ``[B, H*6]`` with ``raw[k, j] = 0.1 k`` whatever the observation."""
    lin = torch.nn.Linear(18, H * 6)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(0.1 * torch.arange(H, dtype=torch.float32).repeat_interleave(6))
    return lin


def export(tmp_path, execution: ChunkExecution) -> str:
    meta = make_meta("so101", JOINTS, DEFAULT, [("joint_pos", 6, 1.0), ("joint_vel", 6, 0.1), ("last_action", 6, 1.0)],
                     SCALE, ROBOT.control.policy_hz, chunk_length=H, chunk_execution=execution)
    return str(export_policy(PolicyHead(constant_chunk_net(), meta), meta, tmp_path / "policy", formats=("onnx",)))


@pytest.mark.parametrize("execution, expected_raw, inferences_per_tick", [
    (ChunkExecution("open_loop", 2, 0.0), [0.0, 0.1], 0.5),
    # every step averages chunk_{t-k}[k] = 0.1 k over ages k = 0..3 with w = 1, 1/2, 1/4, 1/8 from the OLDEST (k = 3)
    (ChunkExecution("temporal_ensemble", H, float(np.log(2.0))), [(0.3 + 0.2 / 2 + 0.1 / 4 + 0.0 / 8) / 1.875], 1.0),
], ids=["open_loop", "temporal_ensemble"])
def test_policy_node_plays_the_artifacts_chunk_execution(tmp_path, execution, expected_raw, inferences_per_tick):
    domain = fresh_domain_id()
    probe = Probe(domain, JOINTS)
    stats = tmp_path / "stats.json"
    # a stall of the test's own state publisher under load must not look like a stale robot: the watchdog has its
    # own test (test_ros_safety); a hold would repeat commands and restart the chunks this test checks
    nodes = Nodes("deploy.launch.yaml", {"policy": export(tmp_path, execution)}, domain, tmp_path,
                  extra={"policy_node": {"soft_start_s": 0.0, "stale_state_timeout": 2.0, "stats_file": str(stats)}})
    try:
        assert probe.wait_for(lambda: "commands on" in nodes.log("policy_node"), 90), nodes.log("policy_node")
        assert f"chunk {H}" in nodes.log("policy_node") and execution.mode in nodes.log("policy_node")
        probe.state_fn = lambda t: DEFAULT
        assert probe.wait_for(lambda: len(probe.received()) >= 40, 60)
        assert nodes.stop()["policy_node"] == 0
    finally:
        nodes.stop()
        probe.close()
    summary = json.loads(stats.read_text())
    assert summary.get("stale", 0) == 0, json.dumps(summary)  # every command came from the policy
    commands = np.array([c for _, c in probe.received()])[10:]  # past the rate-limited approach
    raw = (commands - DEFAULT) / SCALE  # [T, 6]: every joint plays the same raw value
    np.testing.assert_allclose(raw, raw[:, :1].repeat(6, 1), atol=1e-6)
    values = np.round(raw[:, 0], 6)
    assert sorted(set(values.tolist())) == pytest.approx(expected_raw, abs=1e-6)
    if len(expected_raw) == 2:  # open loop: the two actions alternate, one inference per two ticks
        assert np.all(values[1:] != values[:-1])
    expected = pytest.approx(inferences_per_tick * summary["commands"], abs=1.0)
    assert summary["inferences"] == expected, json.dumps(summary)
