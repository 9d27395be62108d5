"""Run a node until SIGINT/SIGTERM, with any rclpy executor.

rclpy's own signal handler shuts the context down, which the EventsExecutor does not notice
(it kept spinning after Ctrl-C in our tests). Here a plain Python handler sets a flag and the
executor spins in 50 ms slices, so every executor stops within one slice. A node with a periodic
timer of its own (the policy node's watchdog) can spin without a slice (``timeout_sec=None``):
the executor then wakes for work only, and rclpy's SingleThreadedExecutor does not create and
destroy a timeout timer at every wake-up (500 times a second with 500 Hz joint states).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

N = TypeVar("N", bound=Node)


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


def run_node(args: list[str] | None, name: str, make: Callable[[threading.Event], N],
             refused: tuple[type[Exception], ...], finish: Callable[[N], None] | None = None) -> N | None:
    """A console entry point's whole life: init, ``make(stop)``, spin on a SingleThreadedExecutor until
    SIGINT/SIGTERM, then ``finish(node)`` and shut down. Returns the node, or None (logged as fatal under
    ``name``) when ``make`` raised one of ``refused``: the caller's exit code 2."""
    stop = init(args)
    try:
        node = make(stop)
    except refused as exc:
        rclpy.logging.get_logger(name).fatal(f"refusing to start: {exc}")
        rclpy.try_shutdown()
        return None
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    log = rclpy.logging.get_logger(name)
    try:
        spin(executor, stop)
    finally:
        # one line per shutdown stage, so a node that has to be killed shows in its log where it hung
        log.info("stopping: " + ("signal received" if stop.is_set() else "context shut down"))
        if finish is not None:
            finish(node)
        executor.shutdown()
        node.destroy_node()
        log.info("node destroyed; leaving DDS")
        rclpy.try_shutdown()
    return node


def set_realtime(priority: int) -> int:
    """Put every thread of this process in SCHED_FIFO at ``priority`` (1-99); returns the thread count.

    Threads made later (DDS, onnxruntime) inherit it. Raises ``PermissionError`` naming the fix when the
    process may not (no CAP_SYS_NICE and no ``rtprio`` limit).
    """
    if not 1 <= priority <= 99:
        raise ValueError(f"real-time priority {priority} must be in 1..99 (0 leaves normal scheduling).")
    threads = [int(t) for t in os.listdir("/proc/self/task")]
    try:
        for tid in threads:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError as exc:
        raise PermissionError(
            f"SCHED_FIFO {priority} refused ({exc}); allow it with `ulimit -r {priority}` (or a line "
            f"'<user> - rtprio {priority}' in /etc/security/limits.conf), run as root, or set rt_priority:=0."
        ) from exc
    return len(threads)
