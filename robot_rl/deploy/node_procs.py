"""Start the nodes of a ``ros_nodes`` launch file as processes, without the ROS 2 launch system.

Used by ``robot-rl deploy sim2sim``, the ROS tests and ``benchmarks/deploy_latency.py``: each node
runs as ``python -m ros_nodes.<exec> --ros-args ...`` with the arguments the YAML launch file
resolves to (:mod:`robot_rl.deploy.launch_plan`) in an environment from
:func:`robot_rl.deploy.ros_env.ros_environment`. Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from robot_rl.deploy.launch_plan import NodeLaunch, plan_launch
from robot_rl.deploy.ros_env import ros_environment, ros_nodes_path


def node_command(node: NodeLaunch, extra: dict[str, object] | None = None) -> list[str]:
    """``[python, -m, pkg.exec, --ros-args, ..., -p k:=v ...]`` for one node; ``extra`` adds ``-p``."""
    cmd = [sys.executable, "-m", f"{node.package}.{node.executable}", *node.ros_args()]
    for key, value in (extra or {}).items():
        cmd += ["-p", f"{key}:={value}"]
    return cmd


class NodeProcesses:
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
        self.env = ros_environment(domain_id)
        repo = ros_nodes_path().parent
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ros_nodes_path()), str(repo), self.env.get("PYTHONPATH", "")) if p
        )
        self.plan = plan_launch(path, args, {"ros_nodes": ros_nodes_path()})
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.commands: dict[str, list[str]] = {}
        for node in self.plan:
            cmd = node_command(node, (extra or {}).get(node.name))
            self.commands[node.name] = cmd
            if log_dir is None:
                self.procs[node.name] = subprocess.Popen(cmd, env=self.env)
                continue
            self.logs[node.name] = Path(log_dir) / f"{node.name}.log"
            with open(self.logs[node.name], "w") as log:
                self.procs[node.name] = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)

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
        """SIGINT every node (as ``ros2 launch`` does on Ctrl-C), kill after ``timeout``; exit codes."""
        return stop_processes(self.procs, timeout)


def stop_processes(procs: dict[str, subprocess.Popen], timeout: float = 10.0) -> dict[str, int]:
    """SIGINT every running process (as ``ros2 launch`` does on Ctrl-C), SIGKILL those still running after
    ``timeout`` s; ``{name: exit code}``."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    codes = {}
    for name, proc in procs.items():
        try:
            codes[name] = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[name] = proc.wait()
    return codes
