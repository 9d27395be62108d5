"""Typed ROS parameter access shared by the nodes: declare with a type, read with a clear error."""

from __future__ import annotations

from typing import Any

from rclpy.exceptions import InvalidParameterTypeException, ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

_TYPES = {
    str: Parameter.Type.STRING,
    float: Parameter.Type.DOUBLE,
    int: Parameter.Type.INTEGER,
    bool: Parameter.Type.BOOL,
    "str[]": Parameter.Type.STRING_ARRAY,
    "float[]": Parameter.Type.DOUBLE_ARRAY,
}


def declare(node: Node, spec: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """Declare ``{name: (type, default or None)}`` and return ``{name: value}``.

    A parameter with default ``None`` is required: its absence raises a ``ValueError`` that names it
    and the fix (generate the parameter file with ``robot-rl ros params <robot>``).
    """
    values = {}
    for name, (kind, default) in spec.items():
        try:
            if default is None:
                node.declare_parameter(name, _TYPES[kind])
            else:
                node.declare_parameter(name, default)
        except InvalidParameterTypeException as exc:
            raise ValueError(
                f"parameter {name!r} of node {node.get_name()!r} has the wrong type ({exc}); write floats "
                f"with a decimal point (-p {name}:=0.0) and lists as [a, b]."
            ) from exc
        try:
            value = node.get_parameter(name).value
        except ParameterUninitializedException:
            value = None
        if value is None:
            raise ValueError(
                f"parameter {name!r} of node {node.get_name()!r} is not set; pass --params-file with a "
                f"file from `robot-rl ros params <robot>` or -p {name}:=..."
            )
        values[name] = list(value) if kind in ("str[]", "float[]") else value
    return values
