"""The ``robot-rl`` console script: dispatches to ``robot_rl.commands.<name>``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import robot_rl.commands as commands_pkg
from robot_rl.errors import EXIT_BAD_INPUT, user_error_types


def _subcommands() -> dict[str, str]:
    """Map each subcommand name to its one-line summary, read without importing the module."""
    found = {}
    for info in pkgutil.iter_modules(commands_pkg.__path__):
        if info.name.startswith("_"):
            continue
        source = Path(commands_pkg.__path__[0], f"{info.name}.py").read_text()
        summary = ""
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "SUMMARY" for t in node.targets
            ):
                summary = ast.literal_eval(node.value)
        found[info.name.replace("_", "-")] = summary
    return dict(sorted(found.items()))


def _usage(subcommands: dict[str, str]) -> str:
    width = max(len(n) for n in subcommands) if subcommands else 0
    lines = [
        "usage: robot-rl <command> [args...]",
        "",
        "Train, evaluate, export and deploy robot policies with learned critics.",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {summary}" for name, summary in subcommands.items()]
    lines += ["", "Run `robot-rl <command> --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``robot-rl`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    subcommands = _subcommands()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage(subcommands))
        return 0
    name = argv[0]
    if name not in subcommands:
        print(f"robot-rl: unknown command {name!r}.\n\n{_usage(subcommands)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"robot_rl.commands.{name.replace('-', '_')}")
    try:
        return int(module.main(argv[1:]) or 0)
    except user_error_types() as exc:  # bad input: the message names file, key, value and fix
        print(f"robot-rl {name}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
