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
