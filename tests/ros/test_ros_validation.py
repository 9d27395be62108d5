"""Issue 14 items 3-5 over real DDS: the policy node refuses bad parameters and artifacts before its
first command (exit 2, the same message as ``deploy check``), and never commands outside the limits.

The policy node runs as its own process from deploy.launch.yaml with the packaged so101 parameter
file; a probe in the test plays the robot driver.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import yaml
from fuzz_cases_artifact import replace_onnx, reseal
from ros_support import Nodes, Probe
from test_ros_safety import DEFAULT, ROBOT, export, oscillating_net, wait_started

from robot_rl.cli import main as cli

pytestmark = pytest.mark.ros

LOWER = np.array([j.lower for j in ROBOT.joints])
UPPER = np.array([j.upper for j in ROBOT.joints])


def refused(probe: Probe, nodes: Nodes) -> str:
    """Wait for the policy node to exit; assert exit 2 and that nothing was published; return its log."""
    proc = nodes.procs["policy_node"]
    assert probe.wait_for(lambda: proc.poll() is not None, 90), "the node did not refuse to start"
    log = nodes.log("policy_node")
    assert proc.returncode == 2, log
    assert "refusing to start" in log and "Traceback" not in log, log
    time.sleep(0.3)
    assert probe.received() == []
    return log


def test_nan_stale_timeout_is_refused_at_start(deploy_nodes, tmp_path):
    probe, start = deploy_nodes
    probe.state_fn = lambda t: DEFAULT
    log = refused(probe, start(export(tmp_path, oscillating_net()), stale_state_timeout=".nan"))
    assert "policy_node parameters: stale_state_timeout = nan: must be a finite number" in log, log


def test_state_outside_the_limits_never_yields_a_command_outside(deploy_nodes, tmp_path):
    probe, start = deploy_nodes
    nodes = start(export(tmp_path, oscillating_net()), soft_start_s=0.2)
    wait_started(probe, nodes)
    # the probe must see the first command: wait until the node's publisher has matched the probe's subscription
    # (discovering the publisher in the graph is not enough: under load the first command could still be lost)
    assert probe.wait_for(lambda: probe.command_sub.get_publisher_count() > 0, 30), "command publisher not matched"
    # joint 0 measured 0.4 rad below its lower limit, joint 1 0.3 rad above its upper one
    outside = DEFAULT.copy()
    outside[0], outside[1] = LOWER[0] - 0.4, UPPER[1] + 0.3
    probe.state_fn = lambda t: outside
    assert probe.wait_for(lambda: len(probe.received()) >= 40, 90), nodes.log("policy_node")
    commands = np.array([c for _, c in probe.received()])
    assert np.all(commands >= LOWER) and np.all(commands <= UPPER), commands[:3]
    # the first command starts from the measured pose clamped to the limits (it stepped from outside before)
    np.testing.assert_allclose(commands[0, :2], [LOWER[0], UPPER[1]])
    assert nodes.stop()["policy_node"] == 0


def test_node_refuses_what_deploy_check_refuses_before_its_first_command(deploy_nodes, tmp_path, capsys):
    probe, start = deploy_nodes
    probe.state_fn = lambda t: DEFAULT
    # 1. an ONNX graph 7 wide for 6 joints (it used to crash at the first inference, after 3 commands)
    wide = export(tmp_path / "wide", oscillating_net())
    replace_onnx(tmp_path / "wide" / "policy", width=7)
    reseal(tmp_path / "wide" / "policy")
    assert cli(["deploy", "check", wide, "--robot", "so101", "--runs", "1"]) == 2
    message = capsys.readouterr().err.removeprefix("REFUSED: ").strip()
    assert "policy.onnx: output 'action'" in message
    log = refused(probe, start(wide))
    assert message in log, (message, log)
    # 2. default_joint_pos edited (with its offset) and the checksums recomputed: the node ran it before
    art = tmp_path / "moved" / "policy"
    export(tmp_path / "moved", oscillating_net())
    meta = yaml.safe_load((art / "policy.yaml").read_text())
    for key in ("default_joint_pos", "offset"):
        values = meta[key] if key == "default_joint_pos" else meta["action"][key]
        values[2] += 0.3
    (art / "policy.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    reseal(art)
    assert cli(["deploy", "check", str(art), "--robot", "so101", "--runs", "1"]) == 2
    assert "default_joint_pos[2] = 1.3: joint 'elbow_flex' differs from default 1" in capsys.readouterr().err
    log = refused(probe, start(str(art)))
    assert "default_joint_pos[2] = 1.3: joint 'elbow_flex' differs from default 1" in log, log

