"""Start the nodes of a ``ros_nodes`` launch file as processes, without the ROS 2 launch system.

Used by ``robot-rl deploy sim2sim``, the ROS tests and ``benchmarks/deploy_latency.py``: each node
runs as ``python -m ros_nodes.<exec> --ros-args ...`` with the arguments the YAML launch file
resolves to (:mod:`robot_rl.deploy.launch_plan`) in an environment from
:func:`robot_rl.deploy.ros_env.ros_environment`. :class:`NodeGroup` (environment, process table,
logs, real-time scheduling, stop) also runs the demo nodes of :mod:`robot_rl.demos.ros_launch`.
:func:`plan_realtime` chooses which nodes of a sim-to-sim run get SCHED_FIFO. Standard library and
:mod:`robot_rl.errors` only.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robot_rl.deploy.launch_plan import NodeLaunch, plan_launch
from robot_rl.deploy.ros_env import ros_environment, ros_nodes_path
from robot_rl.errors import InputError

SIM_ROBOT = "sim_robot"
"""Node name of the simulated robot (ros_nodes/launch/sim2sim.launch.yaml): the stand-in for a robot driver."""

DEFAULT_SIM_RT_PRIORITY = 50
"""SCHED_FIFO priority of the simulated robot in sim-to-sim runs, as ros2_control runs a driver's loop."""


def node_command(node: NodeLaunch, extra: dict[str, object] | None = None) -> list[str]:
    """``[python, -m, pkg.exec, --ros-args, ..., -p k:=v ...]`` for one node; ``extra`` adds ``-p``."""
    cmd = [sys.executable, "-m", f"{node.package}.{node.executable}", *node.ros_args()]
    for key, value in (extra or {}).items():
        cmd += ["-p", f"{key}:={value}"]
    return cmd


def node_environment(domain_id: int) -> dict[str, str]:
    """:func:`ros_environment` of ``domain_id`` with the ``ros_nodes`` sources and the repository first on
    ``PYTHONPATH`` (so ``python -m ros_nodes.<exec>`` runs without installing the package)."""
    env = ros_environment(domain_id)
    src = ros_nodes_path()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), str(src.parent), env.get("PYTHONPATH", "")) if p)
    return env


def _default_sigint() -> None:
    """In a node's child process before exec: SIGINT back to its default action. A runner started in the
    background by a non-interactive shell (CI, ``nohup ... &``) ignores SIGINT, and ignored signals survive
    exec, so without this the nodes would ignore :meth:`NodeGroup.stop`'s SIGINT and be killed after the
    timeout instead of shutting down."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class NodeGroup:
    """Node processes of one ROS domain by name: their command lines, processes and log files.

    Args:
        domain_id: ROS_DOMAIN_ID of every node.
        log_dir: node ``name`` writes to ``log_dir/<name>.log`` (the folder is created); None: the terminal.
    """

    def __init__(self, domain_id: int, log_dir: Path | None = None) -> None:
        self.env = node_environment(domain_id)
        self.log_dir = None if log_dir is None else Path(log_dir)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.commands: dict[str, list[str]] = {}

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        """Run ``cmd`` as node ``name`` in the group's environment (it inherits this process's scheduling)."""
        self.commands[name] = cmd
        if self.log_dir is None:
            self.procs[name] = subprocess.Popen(cmd, env=self.env, preexec_fn=_default_sigint)
            return self.procs[name]
        self.logs[name] = self.log_dir / f"{name}.log"
        with open(self.logs[name], "w") as log:
            self.procs[name] = subprocess.Popen(
                cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_default_sigint
            )
        return self.procs[name]

    def log(self, name: str) -> str:
        """Everything node ``name`` printed so far (when started with a ``log_dir``)."""
        return self.logs[name].read_text()

    def exited(self) -> dict[str, int]:
        """``{node: exit code}`` of the nodes that have stopped."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def set_realtime(self, priority: int, nodes: tuple[str, ...] | None = None) -> None:
        """Every thread of every running node (or of ``nodes`` only) to SCHED_FIFO ``priority`` (as ``chrt -a -f
        -p``); threads made later inherit it. Raises ``PermissionError`` without the right (root, CAP_SYS_NICE or
        rtprio), ``KeyError`` naming the started nodes for an unknown name."""
        unknown = set(nodes or ()) - set(self.procs)
        if unknown:
            raise KeyError(f"no started node named {sorted(unknown)}; started: {sorted(self.procs)}")
        for name, proc in self.procs.items():
            if proc.poll() is not None or (nodes is not None and name not in nodes):
                continue
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                try:
                    os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(priority))
                except ProcessLookupError:  # the thread ended meanwhile
                    continue

    def stop(self, timeout: float = 10.0) -> dict[str, int]:
        """SIGINT every running node (as ``ros2 launch`` does on Ctrl-C), SIGKILL those still running after
        ``timeout`` s; ``{node: exit code}``."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


class NodeProcesses(NodeGroup):
    """The nodes of ``launch`` (a file name in ``ros_nodes/launch`` or a path), running.

    Args:
        args: launch arguments (``policy``, ``robot``, ``namespace``, ``use_sim``).
        domain_id: ROS_DOMAIN_ID of every node.
        log_dir: each node's output goes to ``log_dir/<node>.log``; None: inherit the terminal.
        extra: ``{node name: {parameter: value}}`` added after the parameter files.
    """

    def __init__(self, launch: str | Path, args: dict[str, str], domain_id: int, log_dir: Path | None = None,
                 extra: dict[str, dict[str, object]] | None = None) -> None:
        path = Path(launch)
        if not path.is_file():
            path = ros_nodes_path() / "launch" / str(launch)
        super().__init__(domain_id, log_dir)
        self.plan = plan_launch(path, args, {"ros_nodes": ros_nodes_path()})
        for node in self.plan:
            self.start(node.name, node_command(node, (extra or {}).get(node.name)))


def realtime_refusal(priority: int) -> str | None:
    """None when this process may start SCHED_FIFO ``priority`` processes, else why not (one phrase).

    Probes it: a child Python sets itself to SCHED_FIFO and exits (about 20 ms). That covers every rule at
    once: root or CAP_SYS_NICE, the RLIMIT_RTPRIO limit, and a container's or cgroup's real-time budget."""
    probe = f"import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param({int(priority)}))"
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    rtprio = resource.getrlimit(resource.RLIMIT_RTPRIO)[0]
    limit = "unlimited" if rtprio == resource.RLIM_INFINITY else str(rtprio)
    return (f"this user may not set SCHED_FIFO {priority} (uid {os.geteuid()}, RLIMIT_RTPRIO {limit}; needs "
            f"CAP_SYS_NICE, which root normally has, or an rtprio limit >= {priority}: ulimit -r)")


@dataclass(frozen=True)
class RealtimePlan:
    """Which nodes of a sim-to-sim run go to SCHED_FIFO after the first episode, and the line that says so.

    ``priority`` 0: every node at normal scheduling. ``nodes`` None: every node."""

    priority: int
    nodes: tuple[str, ...] | None
    note: str


def plan_realtime(rt_priority: int, sim_rt_priority: int,
                  refusal: Callable[[int], str | None] = realtime_refusal) -> RealtimePlan:
    """The scheduling of a sim-to-sim run: ``rt_priority > 0`` puts both nodes at SCHED_FIFO (refused with an
    :class:`InputError` without the rights); otherwise ``sim_rt_priority > 0`` puts the simulated robot alone
    there where the process may (a robot driver runs its loop real-time; the policy node, the part that is
    deployed, stays at normal scheduling), and says what is lost where it may not. ``refusal``:
    :func:`realtime_refusal` (a parameter so that a test can stand in for the permission check)."""
    if rt_priority:
        reason = refusal(rt_priority)
        if reason:
            raise InputError(f"--rt-priority {rt_priority}: {reason}", key="--rt-priority", value=rt_priority,
                             fix="run as root or with an rtprio limit (ulimit -r), or leave out --rt-priority")
        return RealtimePlan(rt_priority, None, f"scheduling: both nodes at SCHED_FIFO {rt_priority} after the "
                                               "first episode (--rt-priority)")
    if not sim_rt_priority:
        return RealtimePlan(0, None, "scheduling: both nodes at normal scheduling (--sim-rt-priority 0); on a busy "
                                     "computer the simulated robot's loop runs late and success drops "
                                     "(docs/deploy.md, section 3)")
    reason = refusal(sim_rt_priority)
    if reason:
        return RealtimePlan(0, None, f"scheduling: the simulated robot runs at normal scheduling: {reason}. On a "
                                     "busy computer its loop then runs late, which a robot driver's does not: two "
                                     "so101_reach_deploy policies kept 0.87x of their success so, 1.00x with it "
                                     "(docs/deploy.md, section 9)")
    return RealtimePlan(sim_rt_priority, (SIM_ROBOT,),
                        f"scheduling: the simulated robot at SCHED_FIFO {sim_rt_priority} after the first episode, "
                        "as a robot driver's loop; the policy node at normal scheduling (--sim-rt-priority 0: "
                        "neither)")
