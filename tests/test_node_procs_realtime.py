"""NodeGroup: real processes started in the group's environment, SCHED_FIFO for all of them or only the named ones,
the choice of which (plan_realtime, its permission check stood in for by named fakes), and the suite's guard
against a test that leaves the runner at another scheduling policy."""

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.deploy import node_procs
from robot_rl.deploy.node_procs import (
    DEFAULT_SIM_RT_PRIORITY,
    NodeGroup,
    node_environment,
    plan_realtime,
    realtime_refusal,
)
from robot_rl.errors import InputError


@pytest.fixture
def two_nodes(tmp_path):
    nodes = NodeGroup(domain_id=7, log_dir=tmp_path / "logs")  # stand-ins for ROS nodes: `sleep` processes
    for name in ("sim_robot", "policy_node"):
        nodes.start(name, ["sleep", "30"])
    yield nodes
    assert nodes.stop(timeout=5.0) == {"sim_robot": -2, "policy_node": -2}  # SIGINT ends `sleep`


def test_nodes_start_in_the_ros_environment_with_the_node_sources_on_the_path(tmp_path):
    nodes = NodeGroup(domain_id=7, log_dir=tmp_path / "new" / "logs")
    proc = nodes.start("echo", [sys.executable, "-c", "import os; print(os.environ['ROS_DOMAIN_ID'], "
                                                      "os.environ['PYTHONPATH'])"])
    assert proc.wait(timeout=30) == 0 and nodes.exited() == {"echo": 0}
    domain, path = nodes.log("echo").split()
    assert domain == "7" and path.split(os.pathsep)[:2] == node_environment(7)["PYTHONPATH"].split(os.pathsep)[:2]
    assert path.split(os.pathsep)[0].endswith("ros_nodes") and nodes.commands["echo"][0] == sys.executable


def test_nodes_stop_on_sigint_even_when_the_runner_ignores_it(tmp_path):
    # as under `nohup ... &` from a script: ignored signals survive exec unless the group resets them
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        nodes = NodeGroup(domain_id=7, log_dir=tmp_path / "logs")
        nodes.start("sim_robot", ["sleep", "30"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert nodes.stop(timeout=5.0) == {"sim_robot": -signal.SIGINT}


def test_only_the_named_nodes_become_real_time(two_nodes):
    # the children inherit this process's policy (the suite's guard in tests/conftest.py keeps it as it started)
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        pytest.skip("pytest itself was started at another scheduling policy than SCHED_OTHER (e.g. under chrt)")
    assert os.sched_getscheduler(two_nodes.procs["policy_node"].pid) == os.SCHED_OTHER
    try:
        two_nodes.set_realtime(1, ("sim_robot",))
    except PermissionError:
        pytest.skip("this user may not set SCHED_FIFO (needs root, CAP_SYS_NICE or an rtprio limit)")
    assert os.sched_getscheduler(two_nodes.procs["sim_robot"].pid) == os.SCHED_FIFO
    assert os.sched_getscheduler(two_nodes.procs["policy_node"].pid) == os.SCHED_OTHER
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller itself stays at normal scheduling


def test_an_unknown_node_name_is_refused_naming_the_started_ones(two_nodes):
    with pytest.raises(KeyError, match=r"no started node named \['sim'\]; started: \['policy_node', 'sim_robot'\]"):
        two_nodes.set_realtime(1, ("sim",))


def test_the_suite_fails_a_test_that_leaves_the_runner_at_another_scheduling_policy(pytester):
    """SCHED_BATCH needs no privilege and is as foreign to the runner's children as SCHED_FIFO."""
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())  # this suite's guard
    pytester.makepyfile("""
        import os

        def test_leaks():
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

        def test_after():
            assert os.sched_getscheduler(0) == os.SCHED_OTHER
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_leaks* left this test process at scheduling policy SCHED_BATCH*"])


def _allowed(priority):  # stand-in for the permission check (realtime_refusal spawns a probe process)
    return None


def _refused(priority):  # stand-in for the permission check of a user without rtprio rights
    return f"this user may not set SCHED_FIFO {priority} (uid 1000, RLIMIT_RTPRIO 0; ...)"


def test_sim2sim_puts_only_the_simulated_robot_at_sched_fifo_by_default_where_allowed():
    plan = plan_realtime(0, DEFAULT_SIM_RT_PRIORITY, refusal=_allowed)
    assert (plan.priority, plan.nodes) == (50, ("sim_robot",))
    assert "simulated robot at SCHED_FIFO 50" in plan.note and "policy node at normal scheduling" in plan.note


def test_without_the_rights_it_runs_at_normal_scheduling_and_says_what_that_costs():
    plan = plan_realtime(0, DEFAULT_SIM_RT_PRIORITY, refusal=_refused)
    assert (plan.priority, plan.nodes) == (0, None)
    assert "RLIMIT_RTPRIO 0" in plan.note and "0.87x" in plan.note and "docs/deploy.md" in plan.note


def test_the_opt_out_asks_no_permission_and_both_nodes_stay_normal():
    def never(priority):
        raise AssertionError("no permission check for normal scheduling")

    plan = plan_realtime(0, 0, refusal=never)
    assert (plan.priority, plan.nodes) == (0, None) and "--sim-rt-priority 0" in plan.note


def test_an_explicit_rt_priority_covers_both_nodes_and_is_refused_as_bad_input_without_the_rights():
    plan = plan_realtime(20, 50, refusal=_allowed)
    assert (plan.priority, plan.nodes) == (20, None) and "both nodes at SCHED_FIFO 20" in plan.note
    with pytest.raises(InputError, match=r"--rt-priority 20: this user may not set SCHED_FIFO 20"):
        plan_realtime(20, 50, refusal=_refused)


def test_a_failed_probe_names_the_user_and_its_rtprio_limit(monkeypatch):
    def probe_fails(cmd, **kwargs):  # stand-in for the probe process of a user without the rights
        assert "SCHED_FIFO" in cmd[-1] and "sched_param(30)" in cmd[-1]
        return subprocess.CompletedProcess(cmd, 1, "", "PermissionError: [Errno 1] Operation not permitted")

    monkeypatch.setattr(node_procs.subprocess, "run", probe_fails)
    assert realtime_refusal(30) == (f"this user may not set SCHED_FIFO 30 (uid {os.geteuid()}, RLIMIT_RTPRIO "
                                    f"{_rtprio()}; needs CAP_SYS_NICE, which root normally has, or an rtprio limit "
                                    ">= 30: ulimit -r)")


def _rtprio():
    soft = resource.getrlimit(resource.RLIMIT_RTPRIO)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def test_the_permission_probe_agrees_with_setting_a_real_process():
    refusal = realtime_refusal(1)
    proc = subprocess.Popen(["sleep", "30"])
    try:
        os.sched_setscheduler(proc.pid, os.SCHED_FIFO, os.sched_param(1))
        allowed = True
    except PermissionError:
        allowed = False
    finally:
        proc.kill()
        proc.wait()
    assert (refusal is None) == allowed
