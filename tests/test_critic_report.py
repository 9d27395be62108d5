"""Critic diagnostics: return and statistics math by hand, a report from a toy run, and the CLI on so101_reach."""

import math

import numpy as np
import pytest
from toy_vecenv import ToyReach

from robot_rl.checkpoint import list_checkpoints, load_checkpoint
from robot_rl.commands import critic_report
from robot_rl.compose import compose
from robot_rl.diagnostics.report import build_report
from robot_rl.diagnostics.value_traces import (
    EpisodeTrace,
    chunk_start_trace,
    counted_steps,
    discounted_returns,
    value_stats,
)
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")


def test_discounted_returns_and_counted_steps_by_hand():
    r = np.array([[1.0, 0.0], [2.0, 1.0], [4.0, 0.0]])
    # gamma 0.5: R2 = 4, R1 = 2 + 2 = 4, R0 = 1 + 2 = 3; group 1: R2 = 0, R1 = 1, R0 = 0.5
    np.testing.assert_allclose(discounted_returns(r, 0.5), [[3.0, 0.5], [4.0, 1.0], [4.0, 0.0]])
    assert counted_steps(3, truncated=False, gamma=0.5, tail_weight=0.05).tolist() == [True] * 3
    # truncated after 6 steps: gamma^(6-t) = 1/64, 1/32, 1/16, 1/8, ... <= 0.05 only for t = 0, 1
    assert counted_steps(6, truncated=True, gamma=0.5, tail_weight=0.05).tolist() == [True, True] + [False] * 4


def test_a_chunk_trace_keeps_the_chunk_starts_by_hand():
    """Chunks start at steps 0 and 2 (values there, NaN inside); rewards 1, 2, 3, 4 with gamma 0.5: returns from
    the starts 1 + 0.5*2 + 0.25*3 + 0.125*4 = 3.25 and 3 + 0.5*4 = 5; chunk rewards 1 + 0.5*2 = 2 and 5."""
    nan = np.full(2, np.nan)
    steps = [(np.array([3.0, 3.5]), 1.0), (nan, 2.0), (np.array([4.0, 6.0]), 3.0), (nan, 4.0)]
    trace = chunk_start_trace(steps, 0.5, success=True, truncated=True)
    assert trace.values.shape == (2, 2, 1) and trace.values[:, :, 0].tolist() == [[3.0, 3.5], [4.0, 6.0]]
    assert trace.returns[:, 0].tolist() == pytest.approx([3.25, 5.0])
    assert trace.rewards[:, 0].tolist() == pytest.approx([2.0, 5.0])
    assert trace.counted.all() and trace.success and trace.truncated


def test_value_stats_by_hand():
    # two members, one group: predictions mean [2, 4], realised [1, 5] -> bias (1 - 1)/2 = 0, |err| 1
    values = np.array([[[1.0], [3.0]], [[3.0], [5.0]]])  # [T=2, E=2, G=1]
    trace = EpisodeTrace(values, np.zeros((2, 1)), np.array([[1.0], [5.0]]), np.array([True, True]), True, False)
    stats = value_stats([trace])
    assert stats.bias == [0.0] and stats.abs_error == [1.0] and stats.steps == 2
    assert stats.disagreement == [1.0]  # std of (1, 3) and of (3, 5)
    assert stats.correlation[0] == pytest.approx(1.0) and stats.extra["success_rate"] == 1.0


def _toy_cfg():
    return compose([
        "agent=ppo", "critic=multi", "agent.per_group_values=true", "critic.hidden_dims=[32,32]",
        "agent.actor_hidden_dims=[32,32]", "agent.num_steps_per_env=16", "agent.gamma=0.9", "task.num_envs=16",
        "task.total_steps=2880", "checkpoint_interval=1", "logger=none", "logger.progress=false",
        "eval_episodes=0", "export_formats=[]",
    ])


def test_report_from_a_toy_run_has_per_group_tables_and_figures(tmp_path):
    def factory(num_envs, seed):
        return ToyReach(num_envs=num_envs, seed=seed, max_episode_steps=60)  # 60 > 29 = gamma-horizon

    runner = Runner(_toy_cfg(), tmp_path, env_factory=factory)
    runner.learn(evaluate_and_export=False)
    found = list_checkpoints(tmp_path)
    assert len(found) == 3
    agent = runner.agent

    def loader(path):
        return lambda: agent.load_state_dict(load_checkpoint(path)[1]["agent"])

    checkpoints = [(load_checkpoint(p)[0], loader(p)) for p in found]
    report = build_report(agent, factory, checkpoints, tmp_path / "critic_report", episodes=8, num_envs=4,
                          seed=1, title="toy", tail="exclude")
    text = report.read_text()
    print(text)
    names = {p.name for p in report.parent.iterdir()}
    assert {"values_vs_returns.png", "scatter.png", "bias_over_training.png", "report.md"} <= names
    assert "| distance |" in text and "| bonus |" in text
    for row in [line for line in text.splitlines() if line.startswith("| distance |")]:
        assert all(math.isfinite(float(x)) for x in row.split("|")[2:5])
    # 16 envs x 16 steps per update: checkpoints at 2560 and 2816, the final one at the budget, 2880
    over_training = text.split("## Over training")[1].split("## Figures")[0]
    assert [line.split("|")[1].strip() for line in over_training.splitlines() if line.startswith("| 2")] == [
        "2560", "2816", "2880"]


def test_cli_on_a_real_so101_reach_run(tmp_path, capsys):
    cfg = compose([
        "agent=ppo", "critic=mlp", "critic.hidden_dims=[32]", "agent.actor_hidden_dims=[32]",
        "agent.num_steps_per_env=8", "task.num_envs=4", "task.total_steps=64", "checkpoint_interval=1",
        "logger=none", "logger.progress=false", "eval_episodes=0", "export_formats=[]",
    ])
    Runner(cfg, tmp_path).learn(evaluate_and_export=False)
    assert critic_report.main([str(tmp_path), "--episodes", "2", "--num-envs", "2", "--latest-only"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.endswith("report.md") and "| total |" in (tmp_path / "critic_report" / "report.md").read_text()
    assert critic_report.main([str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_report_of_a_chunked_run_compares_execute_and_replan(tmp_path):
    from robot_rl.train.runner import Runner

    def factory(num_envs, seed):
        return ToyReach(num_envs=num_envs, seed=seed, max_episode_steps=60)

    cfg = compose([
        "agent=chunked_td3", "critic=chunked", "critic.chunk_len=3", "critic.hidden_dims=[32,32]",
        "agent.actor_hidden_dims=[32,32]", "agent.gamma=0.9", "agent.learning_starts=256", "agent.utd_ratio=0.1",
        "agent.batch_size=64", "agent.iteration_steps=512", "task.num_envs=8", "task.total_steps=1024",
        "logger=none", "logger.progress=false", "eval_episodes=0", "export_formats=[]",
    ])
    runner = Runner(cfg, tmp_path, env_factory=factory)
    runner.learn(evaluate_and_export=False)
    agent = runner.agent
    path = list_checkpoints(tmp_path)[-1]
    checkpoints = [(1024, lambda: agent.load_state_dict(load_checkpoint(path)[1]["agent"]))]
    text = build_report(agent, factory, checkpoints, tmp_path / "critic_report", episodes=4, num_envs=4, seed=1,
                        title="chunked").read_text()
    print(text)
    assert "ChunkedCritic" in text and "disagreement.png" in text
    assert "re-plan every step: predicted Q" in text and "execute whole chunks: predicted Q" in text
