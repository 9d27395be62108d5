"""Start the demo nodes (recorder, replay, optional simulated robot) as processes for the CLI and tests.

Each node runs as ``python -m ros_nodes.<exec> --ros-args -r __node:=<name> --params-file <file> -p ...``
(the command line ``ros2 run`` / ``ros2 launch`` would build) in the environment of
:func:`robot_rl.deploy.ros_env.ros_environment` (own ``ROS_DOMAIN_ID``, loopback discovery). The
parameter file holds a ``/**/demo_recorder``, ``/**/demo_replay`` and ``/**/sim_robot`` section
generated from ``hardware/<robot>/robot.yaml`` (topics, command type, joint names, limits, safety).
Standard library + yaml only: no rclpy in the calling process.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robot_rl.deploy.launch_plan import NodeLaunch
from robot_rl.deploy.node_procs import NodeGroup, node_command
from robot_rl.deploy.ros_params import ros_params


def demo_params(robot: dict[str, Any]) -> dict[str, Any]:
    """``{"/**/demo_recorder": ..., "/**/demo_replay": ..., "/**/sim_robot": ...}`` for a robot dict
    (``RobotConfig.as_dict()``): the demo sections of the generated ``ros_nodes/config/<robot>.yaml``."""
    base = ros_params(robot)
    return {key: base[key] for key in ("/**/demo_recorder", "/**/demo_replay", "/**/sim_robot")}


class _NoAliases(yaml.SafeDumper):
    """rcl's parameter-file parser refuses YAML anchors/aliases: write shared lists out each time."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_demo_params(robot: dict[str, Any], path: Path) -> Path:
    """Write :func:`demo_params` as a ROS 2 parameter file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump(demo_params(robot), Dumper=_NoAliases, sort_keys=False, default_flow_style=None,
                              width=110))
    return path


def _ros_value(value: object) -> str:
    """A ``-p name:=value`` literal: bools lower case, strings quoted when YAML would retype them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if isinstance(yaml.safe_load(value or "''"), str) and value else f"'{value}'"
    return str(value)


class DemoNodes(NodeGroup):
    """Demo node processes in one ROS domain, each logging to ``log_dir/<name>.log``.

    Args:
        nodes: ``[(executable, node name, {parameter: value})]``, e.g. ``("recorder_node", "demo_recorder", {...})``.
        params_file: the file of :func:`write_demo_params`.
        domain_id: ROS_DOMAIN_ID of every node.
        namespace: namespace of the nodes and their relative topics.
    """

    def __init__(self, nodes: list[tuple[str, str, dict[str, object]]], params_file: Path, domain_id: int,
                 log_dir: Path, namespace: str = "") -> None:
        super().__init__(domain_id, log_dir)
        for executable, name, params in nodes:
            launch = NodeLaunch("ros_nodes", executable, name, namespace, (str(params_file),),
                                {k: _ros_value(v) for k, v in params.items()})
            self.start(name, node_command(launch))

    def wait_log(self, name: str, text: str, timeout: float) -> bool:
        """Poll ``name``'s log every 50 ms until it contains ``text`` or the node exits; True if found."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.log(name):
                return True
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.05)
        return text in self.log(name)

    def wait(self, name: str, timeout: float | None = None) -> int | None:
        """Exit code of ``name`` once it stops by itself, or None after ``timeout`` s."""
        try:
            return self.procs[name].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, name: str) -> int:
        """SIGKILL ``name`` (a crash: nothing runs on the way out); its exit code."""
        self.procs[name].kill()
        return self.procs[name].wait()


def default_domain_id() -> int:
    """``$ROS_DOMAIN_ID`` or 0."""
    return int(os.environ.get("ROS_DOMAIN_ID", "0") or 0)


def run_until_exit(nodes: DemoNodes, main: str, print_commands: bool = False) -> int:
    """Wait for node ``main`` to exit by itself, echoing its log (Ctrl-C stops every node); stop the others.

    Returns ``main``'s exit code.
    """
    if print_commands:
        for name, cmd in nodes.commands.items():
            print(f"# {name}\n{' '.join(cmd)}")
    shown = 0

    def echo() -> None:
        nonlocal shown
        text = nodes.log(main)
        print(text[shown:], end="", flush=True)
        shown = len(text)

    try:
        while nodes.procs[main].poll() is None:
            echo()
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    codes = nodes.stop()
    echo()
    return codes[main]


def _robot(name: str | None, dataset: Path | None = None) -> dict[str, Any]:
    """``RobotConfig.as_dict()`` of ``name`` (default: the dataset's ``robot_type``); ValueError if unknown."""
    from sim.robots import load_robot

    if name is None and dataset is not None:
        from robot_rl.data.lerobot import meta

        name = meta.load_info(dataset).robot_type
    if not name:
        raise ValueError("which robot? pass --robot (a hardware/<robot>/robot.yaml name, e.g. so101)")
    try:
        return load_robot(name).as_dict()
    except FileNotFoundError as exc:
        raise ValueError(f"robot {name!r}: {exc}") from exc


def replay_over_ros(args: Any) -> int:
    """``robot-rl replay <dataset> --ros``: run the replay node (+ the simulated robot with ``--sim``)."""
    import json
    import sys
    import tempfile

    try:
        robot = _robot(args.robot, args.dataset)
    except (ValueError, FileNotFoundError) as exc:
        print(f"robot-rl replay: {exc}", file=sys.stderr)
        return 2
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="robot_rl_replay_"))
    report = (args.report or log_dir / "report.json").resolve()
    params = write_demo_params(robot, log_dir / "params.yaml")
    spec = [("replay_node", "demo_replay", {"dataset": str(args.dataset.resolve()), "episode": args.episode,
                                             "report_file": str(report)})]
    if args.sim:
        spec.insert(0, ("sim_robot_node", "sim_robot", {}))
    domain = default_domain_id() if args.domain_id is None else args.domain_id
    nodes = DemoNodes(spec, params, domain, log_dir, args.namespace)
    code = run_until_exit(nodes, "demo_replay", args.print_commands)
    print(f"node logs in {log_dir}")
    if code != 0 or not report.is_file():
        print(f"robot-rl replay: the replay node stopped with status {code} before the end", file=sys.stderr)
        return code or 1
    worst = max(json.loads(report.read_text())["command_max"])
    if args.max_error is not None and worst > args.max_error:
        print(f"tracking error {worst:.3e} rad exceeds --max-error {args.max_error}", file=sys.stderr)
        return 1
    return 0


def record_over_ros(args: Any) -> int:
    """``robot-rl record --source ros``: run the recorder node until ``--episodes`` are saved or Ctrl-C.

    ``--sim`` also starts the simulated robot node; ``--teleop`` drives the robot from this terminal's
    keyboard (:class:`robot_rl.demos.ros_teleop.RosTeleop`) while recording.
    """
    import sys
    import tempfile

    try:
        robot = _robot(args.robot)
        keys = None
        if args.teleop:
            from robot_rl.demos.teleop import TerminalKeys

            keys = TerminalKeys()
    except (ValueError, RuntimeError) as exc:
        print(f"robot-rl record: {exc}", file=sys.stderr)
        return 2
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="robot_rl_record_"))
    params = write_demo_params(robot, log_dir / "params.yaml")
    spec = [("recorder_node", "demo_recorder", {
        "dataset": str(args.out.resolve()), "fps": args.fps, "task": args.instruction or "teleoperation",
        "episode_s": float(args.episode_s), "max_gap_s": float(args.max_gap_s), "max_episodes": args.episodes,
        "overwrite": args.overwrite, "resume": args.resume, "auto_start": not args.manual,
        "velocity": not args.no_velocity,
    })]
    if args.sim:
        spec.append(("sim_robot_node", "sim_robot", {}))
    domain = default_domain_id() if args.domain_id is None else args.domain_id
    nodes = DemoNodes(spec, params, domain, log_dir, args.namespace)
    if keys is None:
        code = run_until_exit(nodes, "demo_recorder", args.print_commands)
    else:
        code = _teleop_while_recording(robot, keys, nodes, domain, args.namespace)
    print(f"node logs in {log_dir}; inspect the dataset with `robot-rl dataset info {args.out}`")
    return code


def _teleop_while_recording(robot: dict[str, Any], keys: Any, nodes: DemoNodes, domain: int, namespace: str) -> int:
    """Keyboard teleop over ROS until ``esc``/Ctrl-C or the recorder exits; then stop the nodes."""
    from robot_rl.demos.ros_teleop import RosTeleop
    from robot_rl.demos.teleop import TeleopQuit

    print("keyboard teleop: q w e r t y raise joints 1-6, a s d f g h lower them, [ ] step, space: next "
          "episode, esc: stop (the episode in progress is saved)")
    teleop = RosTeleop(robot, keys, domain, namespace)
    try:
        with keys:
            while nodes.procs["demo_recorder"].poll() is None:
                command = teleop.step()
                line = "waiting for JointState" if command is None else np.array2string(command, precision=3)
                print(f"\r{line}", end="", flush=True)
    except (TeleopQuit, KeyboardInterrupt):
        pass
    finally:
        teleop.close()
    print()
    return nodes.stop()["demo_recorder"]
