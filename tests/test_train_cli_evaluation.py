"""Evaluation statistics against hand-computed values, and episode accounting on the toy env."""

import math

import pytest
import torch
from toy_vecenv import ToyReach

from robot_rl.train.evaluation import evaluate, mean_ci, survival_summary, wilson_interval
from robot_rl.train.progress import eta_seconds, format_duration
from robot_rl.train.runner import EpisodeStats


def test_wilson_interval_matches_hand_computation():
    # p = .9, n = 10, z = 1.96: centre (.9 + z^2/20) / (1 + z^2/10), half z sqrt(.009 + z^2/400) / (1 + z^2/10)
    lo, hi = wilson_interval(9, 10)
    assert lo == pytest.approx(0.5958, abs=1e-3) and hi == pytest.approx(0.9821, abs=1e-3)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-3)  # z^2 / (n + z^2)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)


def test_mean_ci_is_normal_approximation():
    mean, half = mean_ci([1.0, 2.0, 3.0])  # s = 1
    assert mean == 2.0 and half == pytest.approx(1.959964 / math.sqrt(3))
    assert mean_ci([5.0]) == (5.0, float("inf"))


def test_progress_formatting():
    assert format_duration(3725) == "1:02:05" and format_duration(65) == "1:05"
    assert eta_seconds(25, 100, 10.0) == 30.0 and eta_seconds(0, 100, 1.0) == float("inf")


def test_evaluate_runs_exact_quotas_of_complete_episodes():
    env = ToyReach(num_envs=4, seed=0)

    def still(obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 2)

    result = evaluate(still, env, episodes=6, seed=1)
    assert len(result.returns) == 6 and result.lengths == [20] * 6  # truncated at 20 steps
    assert not any(result.successes)  # never moves: the target is >= 0.1 away unless sampled at 0
    s = result.summary()
    assert s["episodes"] == 6 and s["success_rate"] == 0.0 and s["success_ci95"][0] == pytest.approx(0.0)

    def expert(obs: torch.Tensor) -> torch.Tensor:  # obs = target - pos; 0.2 * a closes the gap
        return (obs / 0.2).clamp(-1, 1)

    assert evaluate(expert, env, episodes=8, seed=2).summary()["success_rate"] == 1.0


def test_survival_summary_hand_values():
    s = survival_summary([True, True, False, True])
    assert s["survival_rate"] == 0.75 and s["survival_ci95"] == pytest.approx(list(wilson_interval(3, 4)))
    assert survival_summary([False] * 5)["survival_rate"] == 0.0
    with pytest.raises(ValueError, match="n > 0"):
        survival_summary([])


def test_evaluate_counts_time_limits_not_terminations_as_survival():
    """Standing still, every episode runs to the 20-step limit; running off (|pos| > 1.5) terminates each."""
    env = ToyReach(num_envs=4, seed=0)
    still = evaluate(lambda obs: torch.zeros(obs.shape[0], 2), env, episodes=6, seed=1)
    assert still.timeouts == [True] * 6 and still.summary()["survival_rate"] == 1.0
    away = evaluate(lambda obs: torch.ones(obs.shape[0], 2), env, episodes=6, seed=1)
    assert max(away.lengths) < 20 and away.timeouts == [False] * 6
    s = away.summary()
    assert s["survival_rate"] == 0.0 and s["survival_ci95"] == pytest.approx(list(wilson_interval(0, 6)))


def test_training_window_logs_survival():
    """Two envs end episodes: one by the time limit, one by a termination; then one more time-out."""
    stats = EpisodeStats(num_envs=2, device=torch.device("cpu"))

    class _Step:
        def __init__(self, terminated, truncated):
            self.reward = torch.ones(2)
            self.terminated, self.truncated = torch.tensor(terminated), torch.tensor(truncated)
            self.info = {}

    stats.add(_Step([False, False], [False, False]))
    assert "episode/survival" not in stats.means()
    stats.add(_Step([False, True], [True, False]))
    stats.add(_Step([False, False], [False, True]))
    assert stats.means()["episode/survival"] == pytest.approx(2 / 3)


def test_evaluate_reports_only_what_the_task_defines():
    """A task without a success rule reports no success rate; one whose episodes cannot end early, no survival."""
    env = ToyReach(num_envs=2, seed=0)
    env.has_success = False
    s = evaluate(lambda obs: torch.zeros(obs.shape[0], 2), env, episodes=4, seed=1).summary()
    assert "success_rate" not in s and "success_ci95" not in s and s["survival_rate"] == 1.0
    env.has_success, env.has_terminations = True, False
    s = evaluate(lambda obs: torch.ones(obs.shape[0], 2), env, episodes=4, seed=1).summary()
    assert "survival_rate" not in s and s["success_rate"] == 0.0 and s["episodes"] == 4


def test_training_window_keeps_only_what_the_task_defines():
    stats = EpisodeStats(num_envs=2, device=torch.device("cpu"))

    class _Step:
        def __init__(self) -> None:
            self.reward = torch.ones(2)
            self.terminated, self.truncated = torch.tensor([True, False]), torch.tensor([False, True])
            self.info = {"success": torch.tensor([False, False])}

    stats.add(_Step(), success=False, survival=True)
    assert "episode/success" not in stats.means() and stats.means()["episode/survival"] == 0.5
    stats.add(_Step(), success=True, survival=False)
    assert stats.means()["episode/success"] == 0.0 and stats.means()["episode/survival"] == 0.5


def test_progress_line_shows_survival_where_given():
    from robot_rl.train.progress import Progress

    line = Progress(100, enabled=False).update(50, 1.5, None, 0.25)
    assert "success -" in line and "survival 25%" in line
    assert "survival" not in Progress(100, enabled=False).update(50, 1.5, 0.9)
