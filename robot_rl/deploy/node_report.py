"""What a policy node's ``stats_file`` says about a run, as a row and as one line for people.

The policy node (``ros_nodes/ros_nodes/policy_node.py``) writes its loop statistics (``ros_nodes.stats.LoopStats``:
latency percentiles in ms and event counts) to its ``stats_file`` parameter when it stops. ``robot-rl deploy sim2sim``
prints :func:`describe` after its episodes; ``benchmarks/sim2sim_transfer.py`` keeps :func:`node_counts` in each row.
Standard library only.
"""

from __future__ import annotations

import math

NODE_COUNTS = ("commands", "inferences", "rate_limited", "clamped", "vla_hold", "watchdog_ticks", "stale")
"""Policy node counts a row keeps (events of ``ros_nodes.stats``; absent ones are 0). ``stale``: ticks whose joint
state was older than the safety layer's ``stale_state_timeout``: the node held its last command without inferring."""


def node_counts(stats: dict) -> dict[str, float | int]:
    """The counts of :data:`NODE_COUNTS` (``node_<name>``) and, for a VLA, the age of each query's camera frames
    behind its joint state (``image_age_p50/p99/max_ms``; NaN without cameras)."""
    ages = {f"image_age_{q}_ms": stats.get(f"image_age_{q}_ms", float("nan")) for q in ("p50", "p99", "max")}
    return {f"node_{k}": int(stats.get(k, 0)) for k in NODE_COUNTS} | ages


def describe(stats: dict, control_hz: float | None = None) -> str:
    """One line: the node's observation-to-command latency, how many commands its safety layer changed, its
    inferences and holds (and, where any, the ticks it held on a stale joint state), and (VLA) how old its camera
    frames were, in control steps of ``control_hz`` where given (the ``robot-rl eval --image-lag`` to evaluate
    with); "no statistics" for an empty ``stats``."""
    if not stats:
        return "policy node: no statistics (it wrote no stats_file)"
    counts = node_counts(stats)
    commands, limited = counts["node_commands"], counts["node_rate_limited"]
    share = f" ({limited / commands:.0%})" if commands else ""
    p50, p99 = stats.get("latency_p50_ms", math.nan), stats.get("latency_p99_ms", math.nan)
    text = (f"policy node: latency {p50:.2f} / {p99:.2f} ms (p50 / p99, joint-state stamp to command); "
            f"{limited} of {commands} commands rate-limited{share} and {counts['node_clamped']} clamped by the "
            f"safety layer; {counts['node_inferences']} inferences, {counts['node_vla_hold']} VLA holds, "
            f"{counts['node_watchdog_ticks']} watchdog ticks")
    if counts["node_stale"]:
        text += f"; {counts['node_stale']} ticks held the last command on a stale joint state (no inference)"
    if math.isfinite(counts["image_age_p50_ms"]):
        age50, age99 = counts["image_age_p50_ms"], counts["image_age_p99_ms"]
        text += f"; camera frames {age50:.0f} / {age99:.0f} ms (p50 / p99) behind the joint state"
        if control_hz:
            steps = round(age50 * control_hz / 1e3)
            text += f" = {steps} control step{'' if steps == 1 else 's'} at p50 (robot-rl eval --image-lag)"
    return text
