"""Critic diagnostics: value predictions against realised returns, bias, disagreement, reports."""

from robot_rl.diagnostics.value_traces import EpisodeTrace, ValueStats, collect_traces, discounted_returns, value_stats

__all__ = ["EpisodeTrace", "ValueStats", "collect_traces", "discounted_returns", "value_stats"]
