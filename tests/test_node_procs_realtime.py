"""NodeProcesses.set_realtime: SCHED_FIFO for all started nodes or only the named ones (real processes)."""

import os
import subprocess

import pytest

from robot_rl.deploy.node_procs import NodeProcesses


@pytest.fixture
def two_nodes():
    nodes = NodeProcesses.__new__(NodeProcesses)  # the process table alone, without starting ROS nodes
    def normal() -> None:  # children inherit the caller's policy; start them at normal scheduling
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    nodes.procs = {name: subprocess.Popen(["sleep", "30"], preexec_fn=normal) for name in ("sim_robot", "policy_node")}
    yield nodes
    for proc in nodes.procs.values():
        proc.kill()
        proc.wait()


def test_only_the_named_nodes_become_real_time(two_nodes):
    try:
        two_nodes.set_realtime(1, ("sim_robot",))
    except PermissionError:
        pytest.skip("this user may not set SCHED_FIFO (needs root, CAP_SYS_NICE or an rtprio limit)")
    assert os.sched_getscheduler(two_nodes.procs["sim_robot"].pid) == os.SCHED_FIFO
    assert os.sched_getscheduler(two_nodes.procs["policy_node"].pid) == os.SCHED_OTHER


def test_an_unknown_node_name_is_refused_naming_the_started_ones(two_nodes):
    with pytest.raises(KeyError, match=r"no started node named \['sim'\]; started: \['policy_node', 'sim_robot'\]"):
        two_nodes.set_realtime(1, ("sim",))
