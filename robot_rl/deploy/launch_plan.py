"""Resolve a ROS 2 YAML launch file into node command lines, without the ROS 2 launch system.

``robot-rl deploy sim2sim`` and the ROS tests start exactly the nodes, names, namespaces and
parameter files that ``ros2 launch ros_nodes <file>.launch.yaml`` would, each as
``<executable> --ros-args -r __node:=<name> [-r __ns:=/<ns>] --params-file <file> -p <k>:=<v>``.
Supported: ``arg`` (name, default), ``node`` (pkg, exec, name, namespace, if, param from / name+value),
substitutions ``$(var NAME)`` and ``$(find-pkg-share PKG)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_SUBST = re.compile(r"\$\((var|find-pkg-share) ([^)\s]+)\)")


class LaunchError(ValueError):
    """A launch file this resolver cannot expand; names the file, the entry and the fix."""


@dataclass(frozen=True)
class NodeLaunch:
    """One node of a launch file, substitutions resolved."""

    package: str
    executable: str
    name: str
    namespace: str = ""
    params_files: tuple[str, ...] = ()
    params: dict[str, str] = field(default_factory=dict)

    def ros_args(self) -> list[str]:
        """The ``--ros-args ...`` part of the command line launch_ros would build."""
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:=/{self.namespace.strip('/')}"]
        for path in self.params_files:
            args += ["--params-file", path]
        for key, value in self.params.items():
            args += ["-p", f"{key}:={value}"]
        return args


def _truthy(value: str) -> bool:
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise LaunchError(f"condition value {value!r} must be true/false.")


def plan_launch(path: str | Path, args: dict[str, str], package_share: dict[str, Path]) -> list[NodeLaunch]:
    """The nodes ``path`` starts with launch arguments ``args``.

    Args:
        package_share: ``{package: share directory}`` for ``$(find-pkg-share ...)``.
    """
    path = Path(path)
    entries = (yaml.safe_load(path.read_text()) or {}).get("launch")
    if not isinstance(entries, list):
        raise LaunchError(f"{path}: the top level must be `launch:` with a list of arg/node entries.")
    values: dict[str, str] = {}
    for entry in entries:
        if "arg" in entry:
            spec = entry["arg"]
            if spec["name"] in args:
                values[spec["name"]] = str(args[spec["name"]])
            elif "default" in spec:
                values[spec["name"]] = str(spec["default"])
    unknown = sorted(set(args) - {e["arg"]["name"] for e in entries if "arg" in e})
    if unknown:
        raise LaunchError(f"{path}: unknown launch arguments {unknown}; it declares {sorted(values)}.")

    def subst(text: object) -> str:
        def one(m: re.Match) -> str:
            kind, name = m.groups()
            if kind == "var":
                if name not in values:
                    raise LaunchError(f"{path}: launch argument {name!r} is required; pass {name}:=...")
                return values[name]
            if name not in package_share:
                raise LaunchError(f"{path}: package {name!r} not found; build it with colcon or pass its share dir.")
            return str(package_share[name])

        return _SUBST.sub(one, str(text))

    nodes = []
    for entry in entries:
        if "node" not in entry:
            continue
        spec = entry["node"]
        if "if" in spec and not _truthy(subst(spec["if"])):
            continue
        files, params = [], {}
        for param in spec.get("param", []):
            if "from" in param:
                files.append(subst(param["from"]))
            else:
                params[param["name"]] = subst(param["value"])
        nodes.append(NodeLaunch(spec["pkg"], spec["exec"], subst(spec.get("name", spec["exec"])),
                                subst(spec.get("namespace", "")), tuple(files), params))
    return nodes
