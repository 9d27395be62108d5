"""Subcommands of the ``robot-rl`` console script.

Each module here is one subcommand named after the module (``robot_rl/commands/sim.py`` is
``robot-rl sim``; underscores become dashes). A module defines ``SUMMARY`` (one line for
``robot-rl --help``) and ``main(argv: list[str]) -> int``. Modules are imported only when their
subcommand runs, so a slow import (torch, rclpy) never slows another command.
"""
