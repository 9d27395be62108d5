"""Run a node until SIGINT/SIGTERM, with any rclpy executor.

rclpy's own signal handler shuts the context down, which the EventsExecutor does not notice
(it kept spinning after Ctrl-C in our tests). Here a plain Python handler sets a flag and the
executor spins in 50 ms slices, so every executor stops within one slice. A node with a periodic
timer of its own (the policy node's watchdog) can spin without a slice (``timeout_sec=None``):
the executor then wakes for work only, and rclpy's SingleThreadedExecutor does not create and
destroy a timeout timer at every wake-up (500 times a second with 500 Hz joint states).
"""

from __future__ import annotations

import signal
import threading

import rclpy
from rclpy.executors import Executor
from rclpy.signals import SignalHandlerOptions


def init(args: list[str] | None) -> threading.Event:
    """``rclpy.init`` without rclpy's signal handlers; returns the event SIGINT/SIGTERM set."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def spin(executor: Executor, stop: threading.Event, timeout_sec: float | None = 0.05) -> None:
    """Spin ``executor`` until ``stop`` is set or the context shuts down.

    ``stop`` is checked after every callback and every ``timeout_sec`` (``None``: after callbacks
    only, for nodes whose own timers fire often enough).
    """
    while not stop.is_set() and rclpy.ok():
        executor.spin_once(timeout_sec=timeout_sec)
