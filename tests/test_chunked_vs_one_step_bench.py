"""``benchmarks/chunked_vs_one_step.py``: the open-loop evaluation view and the steps-to-match ratio.

The open-loop view runs a real (untrained, tiny) chunked_td3 agent through the real ``evaluate`` on so101_reach;
the ratio is checked on hand-written curves, since what matters there is the arithmetic of the issue's target.
"""

from __future__ import annotations

import math

import pytest
import torch
from bench_scripts import load

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.chunked_td3 import ChunkedTD3Config
from robot_rl.critics.chunked import ChunkedCriticConfig
from robot_rl.train.evaluation import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")

bench = load("chunked_vs_one_step")


def test_open_loop_view_queries_once_per_chunk_and_drops_plans_at_episode_starts() -> None:
    torch.manual_seed(0)
    env = sim.make_env("so101_reach", num_envs=2, seed=0, episode_s=0.48)  # 12 steps: not a multiple of h = 5
    agent = make_agent(ChunkedTD3Config(actor_hidden_dims=[16]), ChunkedCriticConfig(chunk_len=5, hidden_dims=[16]),
                       EnvSpec.from_env(env))
    queried: list[int] = []
    actor = agent.actor
    agent.actor = lambda x: (queried.append(x.shape[0]), actor(x))[1]
    policy = bench.OpenLoopPolicy(agent, env)
    first_chunk = {}

    def watch(obs: torch.Tensor) -> torch.Tensor:
        action = policy(obs)
        if not first_chunk:
            with torch.no_grad():
                first_chunk["chunk"] = agent.to_env_action(actor(agent.normalizers["policy"](obs)))
        first_chunk.setdefault("played", []).append(action)
        return action

    result = evaluate(watch, env, 4, seed=0)
    assert len(result.successes) == 4
    # each env plays 2 episodes of 12 steps and queries at steps 0, 5 and 10 of each: 3 rows per episode.
    # Without the reset at episode starts it would query at 0, 5, ..., 20 of its 24 steps: 5 rows per env.
    assert sum(queried) == 2 * 2 * 3, queried
    played = torch.stack(first_chunk["played"][:5], dim=1)  # [N, 5, A]: the first chunk, played open loop
    torch.testing.assert_close(played, first_chunk["chunk"].clamp(env.action_low, env.action_high))


def test_steps_to_match_ratio_is_over_the_one_step_arms_total() -> None:
    one = [(0, 0.2), (2000, 0.3), (4000, 0.4)]
    ratio, note = bench.match_ratio(one, [(0, 0.1), (2000, 0.45), (4000, 0.5)])
    assert ratio == pytest.approx(0.5) and "2000 of 4000" in note
    assert bench.match_ratio(one, [(0, 0.4), (2000, 0.0), (4000, 0.0)])[0] == 0.0  # a clone already there
    assert math.isnan(bench.match_ratio(one, [(0, 0.1), (4000, 0.39)])[0])  # never reached: missed
    assert "trivially" in bench.match_ratio([(0, 0.0), (4000, 0.0)], one)[1]
    assert bench.mean_curve([one, one[:2]]) == [(0, 0.2), (2000, 0.3)]  # a stopped run: up to the shortest


def test_report_gives_the_ratio_of_the_open_loop_curve_too(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    def run(h: int, curve: list, open_loop: list | None = None) -> dict:
        extra = {"curve_open_loop": open_loop} if open_loop else {}
        return {"chunk_len": h, "seed": 0, "curve": curve, "cpu_s": 1.0, "wall_s": 1.0, "updates": 1, **extra}

    runs = [run(1, [[0, 0.2], [2000, 0.3], [4000, 0.4]]),
            run(5, [[0, 0.1], [2000, 0.1], [4000, 0.2]], [[0, 0.1], [2000, 0.45], [4000, 0.5]])]
    bench.report(runs, argparse.Namespace(task="so101_lift", steps=4000, demos=None, out=None))
    out = capsys.readouterr().out
    replanned, open_loop = out.split("steps-to-match ratio, ")[1:]
    assert replanned.startswith("re-planned") and "chunked never reaches 0.400" in replanned
    assert open_loop.startswith("open-loop") and "0.500 (chunked reaches 0.400 at 2000 of 4000" in open_loop
    assert "chunked (h = 5), open loop 0.500" in out  # final success of the open-loop curve


def test_merge_reads_the_rows_of_a_results_file(tmp_path, monkeypatch, capsys) -> None:
    import sys

    runs = [{"chunk_len": h, "seed": 0, "curve": curve, "cpu_s": 1.0, "wall_s": 1.0, "updates": 1}
            for h, curve in ((1, [[0, 0.2], [4000, 0.4]]), (5, [[0, 0.1], [2000, 0.4], [4000, 0.6]]))]
    settings = {"task": "so101_lift", "steps": 4000, "demos": None, "jobs": 2}
    path = bench.write_rows(tmp_path / "curves.json", runs, settings=settings, load_average=[1.0, 2.0], wall_s=9.0)
    monkeypatch.setattr(sys, "argv", ["bench", "--merge", str(path), "--out", str(tmp_path / "plot")])
    bench.main()
    out = capsys.readouterr().out
    assert "merged 2 runs" in out and "9 s wall with 2 job(s), load average 1.00 at start, 2.00 at end" in out
    assert "seed 0: 0.500 (chunked reaches 0.400 at 2000 of 4000" in out
    assert (tmp_path / "plot" / "chunked_vs_one_step.png").is_file()
