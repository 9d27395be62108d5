"""The package map of docs/architecture.md, checked on the source: imports point one way.

Reads every module's import statements (no import is executed) and builds the graph of packages:
``sim``, ``ros_nodes`` and each ``robot_rl.<sub>`` (a top-level module such as ``robot_rl/checkpoint.py`` is its
own node). Lazy imports inside functions count: a cycle through them is still a cycle a reader must untangle.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("robot_rl", "sim", "ros_nodes/ros_nodes")


def node_of_module(module: str) -> str | None:
    """``robot_rl.agents.sac`` -> ``robot_rl.agents``; ``sim.env`` -> ``sim``; other packages -> None."""
    parts = module.split(".")
    if parts[0] == "robot_rl" and len(parts) > 1:
        return f"robot_rl.{parts[1]}"
    return parts[0] if parts[0] in ("sim", "ros_nodes") else None


def node_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("").parts
    if rel[0] == "ros_nodes":
        return "ros_nodes"
    return node_of_module(".".join(rel)) or rel[0]


def import_graph() -> dict[str, dict[str, set[str]]]:
    """``{package: {imported package: {files importing it}}}`` over the three source trees."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            src = node_of_file(path)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    dst = node_of_module(name)
                    if dst is not None and dst != src:
                        graph[src][dst].add(str(path.relative_to(ROOT)))
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of the graph as a list of packages (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node], _ = 2, stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_find_cycle_on_hand_made_graphs():
    assert find_cycle({"a": {"b": set()}, "b": {"c": set()}}) is None
    assert find_cycle({"a": {"b": set()}, "b": {"c": set()}, "c": {"a": set()}}) == ["a", "b", "c", "a"]


def test_no_package_imports_another_that_imports_it_back():
    graph = import_graph()
    cycle = find_cycle(graph)
    where = [f"{a} -> {b}: {sorted(graph[a][b])}" for a, b in itertools.pairwise(cycle)] if cycle else []
    assert cycle is None, "package import cycle:\n" + "\n".join(where)


def test_sim_imports_no_robot_rl_and_the_nodes_import_only_deploy_data_errors_and_sim():
    """The nodes run the torch-free deploy runtime, the dataset I/O (recorder/replay), the error type, and sim for
    the simulated robot only."""
    graph = import_graph()
    assert not [dst for dst in graph["sim"] if dst.startswith("robot_rl")], dict(graph["sim"])
    allowed = {"robot_rl.deploy", "robot_rl.data", "robot_rl.errors", "sim"}
    assert set(graph["ros_nodes"]) <= allowed, dict(graph["ros_nodes"])
    assert graph["ros_nodes"]["sim"] <= {"ros_nodes/ros_nodes/sim_robot_node.py"}


def test_config_imports_no_agent_or_critic():
    graph = import_graph()
    assert not {"robot_rl.agents", "robot_rl.critics"} & set(graph["robot_rl.config"]), dict(graph["robot_rl.config"])
