"""Live one-line progress: steps, steps/s, return, success and ETA."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
    """``3725 -> '1:02:05'``, ``65 -> '1:05'``."""
    seconds = max(0, round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def eta_seconds(done: int, total: int, elapsed: float) -> float:
    """Remaining seconds at the average rate so far (inf before any progress)."""
    if done <= 0:
        return float("inf")
    return elapsed * (total - done) / done


class Progress:
    """Rewrites one terminal line (or prints a line per update when not a TTY)."""

    def __init__(self, total_steps: int, start_step: int = 0, enabled: bool = True) -> None:
        self.total = total_steps
        self.start_step = start_step
        self.start = time.monotonic()
        self.enabled = enabled
        self.tty = sys.stderr.isatty()

    def update(self, step: int, ret: float | None, success: float | None, survival: float | None = None) -> str:
        """Show progress at env step ``step`` with the recent mean return and success rate, and the survival rate
        where given (a task whose episodes can end by a fall)."""
        elapsed = time.monotonic() - self.start
        rate = (step - self.start_step) / max(elapsed, 1e-9)
        eta = eta_seconds(step - self.start_step, self.total - self.start_step, elapsed)
        parts = [
            f"{100 * step / self.total:5.1f}%",
            f"{step:,}/{self.total:,} steps",
            f"{rate:,.0f} steps/s",
            "return " + ("-" if ret is None else f"{ret:.2f}"),
            "success " + ("-" if success is None else f"{100 * success:.0f}%"),
            *([] if survival is None else [f"survival {100 * survival:.0f}%"]),
            f"elapsed {format_duration(elapsed)}",
            "ETA " + ("-" if eta == float("inf") else format_duration(eta)),
        ]
        line = " | ".join(parts)
        if self.enabled:
            sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
            sys.stderr.flush()
        return line

    def close(self) -> None:
        """End the progress line."""
        if self.enabled and self.tty:
            sys.stderr.write("\n")
