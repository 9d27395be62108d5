"""ROS test layer setup.

* ``ros_nodes/ros_nodes`` sits inside a directory of the same name, which would otherwise be
  imported as an empty namespace package from the repository root: put its source dir first.
* Without the ``[ros]`` extra the default run (``-m 'not ros'``) does not collect this directory,
  while a run that selects ``-m ros`` fails with the install command instead of skipping.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from robot_rl.deploy.ros_env import ros_nodes_path

if str(ros_nodes_path()) not in sys.path:
    sys.path.insert(0, str(ros_nodes_path()))

HAVE_RCLPY = importlib.util.find_spec("rclpy") is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Ignore this directory when rclpy is missing and the ros layer is not selected."""
    if HAVE_RCLPY:
        return None
    expr = config.getoption("markexpr") or ""
    if "ros" in expr.replace("not ros", ""):
        raise pytest.UsageError('the ros test layer needs rclpy: pip install -e ".[ros,dev]"')
    return True


@pytest.fixture
def deploy_nodes(tmp_path):
    """``(probe, start)``: a probe playing the SO-101 driver on a fresh domain, and ``start(policy, **params)``
    launching deploy.launch.yaml's policy node with that artifact and parameter overrides (stopped after)."""
    from ros_support import Nodes, Probe, fresh_domain_id

    from sim.robots import load_robot

    joints = load_robot("so101").joint_names
    domain = fresh_domain_id()
    probe = Probe(domain, joints)
    started: list[Nodes] = []

    def start(policy: str, **params) -> Nodes:
        nodes = Nodes("deploy.launch.yaml", {"policy": policy}, domain, tmp_path,
                      extra={"policy_node": params})
        started.append(nodes)
        return nodes

    yield probe, start
    for nodes in started:
        nodes.stop()
    probe.close()
