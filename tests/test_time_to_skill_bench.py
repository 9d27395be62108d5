"""benchmarks/time_to_skill.py on hand-made runs (no training): the to-90% window shared by the arms, the
per-seed times and medians (a seed that never reached 90% included), the ratios to rsl_rl, the arm order per
seed, the recipe's changes against the default, and the rows / page layout."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from bench_scripts import load, scripted_clock
from test_bench_peers import NO, YES, ScriptedEpisodes

from robot_rl.compose import compose

tts = load("time_to_skill")
ppo = load("ppo_vs_rsl_rl")


def run(hit: tuple[float, float, int] | None, success: float = 0.95) -> dict:
    """``run_side``'s result for one hand-made run."""
    return {"hit": hit, "wall": 120.0, "cpu": 110.0, "sps": 9000.0, "train": 0.93, "load": 1.5,
            "eval": {"success_rate": success, "success_ci95": (0.88, 0.98)}}


def test_the_window_is_a_fixed_number_of_episodes_whatever_the_env_count(monkeypatch) -> None:
    # window 3 over 2 envs: the last 3 finished episodes, across batches
    env = ScriptedEpisodes([(NO, YES, [True, False]),   # [T, F] -> 0.5
                            (NO, YES, YES),             # [F, T, T] -> 2/3
                            (NO, YES, YES)])            # [T, T, T] -> 1.0
    monkeypatch.setattr(ppo, "time", scripted_clock(monotonic=[0.0, 1.0, 2.0, 3.0],
                                                    process_time=[0.0, 0.5, 1.0, 1.5]))
    rec = ppo.Recorder(env, window=3)
    for _ in range(3):
        rec.step(torch.zeros(2, 1))
    assert [s for *_, s in rec.curve] == pytest.approx([0.5, 2 / 3, 1.0])
    assert rec.reached(0.9) == (3.0, 1.5, 6)
    assert ppo.Recorder(env).window.maxlen == 2  # ppo_vs_rsl_rl's own default: num_envs


def test_stop_at_ends_training_at_the_step_where_reached_first_holds(monkeypatch) -> None:
    env = ScriptedEpisodes([(NO, YES, [True, False]), (NO, YES, YES), (NO, YES, YES), (NO, YES, YES)])
    monkeypatch.setattr(ppo, "time", scripted_clock(monotonic=[0.0, 1.0, 2.0, 3.0, 4.0],
                                                    process_time=[0.0, 0.5, 1.0, 1.5, 2.0]))
    rec = ppo.Recorder(env, window=3, stop_at=0.9)
    steps = 0
    with pytest.raises(ppo.ThresholdReached):
        for _ in range(4):
            rec.step(torch.zeros(2, 1))
            steps += 1
    assert steps == 2 and rec.reached(0.9) == (3.0, 1.5, 6)  # the third step reached 90% and raised


def test_median_counts_a_seed_that_never_reached_it_as_the_slowest() -> None:
    assert tts.median_time([50.0, 40.0, 70.0, 45.0, 60.0]) == 50.0
    assert tts.median_time([50.0, None, 70.0, 45.0, 60.0]) == 60.0  # None ranks above 70
    assert tts.median_time([50.0, None, None, 45.0, None]) is None  # the median falls on a not-reached seed
    assert tts.median_time([40.0, 50.0, 60.0, 80.0]) == 55.0
    assert tts.median_time([40.0, 50.0, None, 80.0]) == 65.0
    assert tts.median_time([40.0, None, None, 80.0]) is None  # one of the two middle ones is not reached
    assert tts.median_time([]) is None


def results() -> dict[int, dict[str, dict]]:
    """Five seeds; the fast arm misses 90% on seed 3, rsl_rl on seeds 1, 3 and 4, default reaches it everywhere."""
    fast = [(40.0, 38.0, 600_000), (50.0, 47.0, 700_000), (45.0, 44.0, 650_000), None, (70.0, 66.0, 900_000)]
    default = [(80.0, 79.0, 1_000_000), (90.0, 88.0, 1_100_000), (85.0, 80.0, 1_050_000), (100.0, 97.0, 1_200_000),
               (75.0, 70.0, 950_000)]
    rsl = [(150.0, 140.0, 1_300_000), None, (120.0, 115.0, 1_250_000), None, None]
    return {seed: {"fast": run(fast[seed], 0.9), "default": run(default[seed]), "rsl_rl": run(rsl[seed], 0.85)}
            for seed in range(5)}


def test_summary_gives_every_seed_the_medians_who_reached_it_and_the_ratios_to_rsl_rl() -> None:
    summary = tts.summarise(tts.rows_of(results()))
    fast, default, rsl = (summary["arms"][a] for a in ("fast", "default", "rsl_rl"))
    assert fast["seeds"] == [0, 1, 2, 3, 4] and fast["wall_s"] == [40.0, 50.0, 45.0, None, 70.0]
    assert (fast["median_wall_s"], fast["median_cpu_s"], fast["median_env_steps"]) == (50.0, 47.0, 700_000)
    assert (fast["reached"], fast["all_reached"]) == (4, False)
    assert (default["median_wall_s"], default["reached"], default["all_reached"]) == (85.0, 5, True)
    assert rsl["median_wall_s"] is None and rsl["reached"] == 2  # [120, 150, -, -, -]: the middle one missed
    assert summary["median_wall_ratios"] == {"fast/rsl_rl": None, "default/rsl_rl": None}


def test_ratios_are_those_of_the_medians_and_the_target_needs_every_seed() -> None:
    res = results()
    res[3]["fast"] = run((55.0, 50.0, 750_000))
    res[1]["rsl_rl"], res[4]["rsl_rl"] = run((160.0, 150.0, 1_400_000)), run((140.0, 135.0, 1_350_000))
    res[3]["rsl_rl"] = run((200.0, 190.0, 1_700_000))
    summary = tts.summarise(tts.rows_of(res))
    assert summary["arms"]["rsl_rl"]["median_wall_s"] == 150.0  # 120, 140, 150, 160, 200
    assert summary["median_wall_ratios"] == pytest.approx({"fast/rsl_rl": 50.0 / 150.0, "default/rsl_rl": 85 / 150})
    lines = tts.report(summary, target_s=60.0)
    assert lines[0] == ("fast     median 50.0 s (every seed reached it); seed 0 40.0 s, seed 1 50.0 s, "
                        "seed 2 45.0 s, seed 3 55.0 s, seed 4 70.0 s")
    assert "median wall fast/rsl_rl: 0.33x" in lines and lines[-1].endswith(": met")
    assert tts.report(tts.summarise(tts.rows_of(results())), 60.0)[-1].endswith(": NOT met")  # seed 3 missed
    assert tts.report(summary, target_s=45.0)[-1].endswith(": NOT met")  # median above the target


def test_report_says_when_a_seed_or_the_median_did_not_reach_it() -> None:
    lines = tts.report(tts.summarise(tts.rows_of(results())), 60.0)
    assert lines[0].startswith("fast     median 50.0 s (only 4/5 seeds reached it);")
    assert "seed 3 not reached" in lines[0]
    assert lines[2].startswith("rsl_rl   median not reached (2/5 seeds reached it);")
    assert "median wall default/rsl_rl: n/a (a median not reached)" in lines


def test_seeds_argument() -> None:
    assert tts.seed_list("0,1,2,3,4") == [0, 1, 2, 3, 4]
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated integers"):
        tts.seed_list("0;1")


def test_arms_argument_and_a_run_without_rsl_rl_has_no_ratios() -> None:
    assert tts.arm_list("fast") == ["fast"] and tts.arm_list("rsl_rl, fast") == ["rsl_rl", "fast"]
    with pytest.raises(argparse.ArgumentTypeError, match="among fast, default, rsl_rl"):
        tts.arm_list("fast,sac")
    rows = [r for r in tts.rows_of(results()) if r["arm"] == "fast"]
    summary = tts.summarise(rows)
    assert list(summary["arms"]) == ["fast"] and summary["median_wall_ratios"] == {}
    assert not any("rsl_rl" in line for line in tts.report(summary, 60.0))
    settings = {"recipe": "reach_fast", "definition": tts.definition(0.9, 128), "threshold": 0.9, "target_s": 60.0,
                "default": "both: ...", "fast_changes": [], "budgets": {"fast": 1_500_000}, "arms": ["fast"],
                "overrides": ["agent.normalize_rewards=false"]}
    text = tts.page({"meta": {"command": "c", "load_average": {"start": 1, "end": 1}, "date": "d"}, "rows": rows,
                     "settings": settings, "summary": summary})
    assert "- Arms run: fast; overrides for every arm: agent.normalize_rewards=false." in text
    assert "| fast | 50.0 s | 4/5 | 47.0 s | 700,000 | n/a (rsl_rl not run) |" in text


def test_each_seed_rotates_the_arm_order() -> None:
    assert [tts.run_order(s) for s in range(4)] == [["fast", "default", "rsl_rl"], ["default", "rsl_rl", "fast"],
                                                    ["rsl_rl", "fast", "default"], ["fast", "default", "rsl_rl"]]


def test_the_recipe_is_a_config_and_its_changes_are_listed() -> None:
    base = ["task=so101_reach", "logger=none"]
    default = compose(base)
    changed = compose([*base, "agent.num_steps_per_env=12", "task.num_envs=64"])
    assert sorted(tts.config_changes(default, changed)) == ["agent.num_steps_per_env 24 -> 12",
                                                            "task.num_envs 128 -> 64"]
    assert tts.config_changes(default, compose([*base, "agent=sac"]))[0] == "agent: PPOConfig -> SACConfig"
    fast = compose([*base, *tts.arm_overrides("reach_fast")["fast"][1]])
    changes = tts.config_changes(default, fast)
    assert changes and all(c.startswith(("task.", "agent.", "critic.")) for c in changes)
    assert "critic.hidden_dims [128, 128] -> [64, 64]" in changes  # a group's value the recipe sets is listed too


def test_rows_and_page_layout(tmp_path) -> None:
    rows = tts.rows_of(results())
    assert [(r["seed"], r["arm"]) for r in rows[:3]] == [(0, "fast"), (0, "default"), (0, "rsl_rl")]
    assert rows[9]["arm"] == "fast" and rows[9]["to_threshold_wall_s"] is None  # seed 3
    settings = {"recipe": "reach_fast", "definition": tts.definition(0.9, 256), "threshold": 0.9,
                "target_s": 60.0, "default": "both: ...", "fast_changes": ["task.num_envs 128 -> 256"],
                "budgets": {"fast": 1_500_000, "default": 2_000_000, "rsl_rl": 2_000_000}}
    path = tts.write_rows(tmp_path / "tts.json", rows, argv=["benchmarks/time_to_skill.py"], settings=settings,
                          summary=tts.summarise(rows))
    text = tts.page(json.loads(path.read_text()))
    assert "(raw rows in `docs/results/agents/time_to_skill.json`)" in text
    assert "(raw rows in `elsewhere.json`)" in tts.page(json.loads(path.read_text()), "elsewhere.json")
    assert "last 256 finished training episodes is >= 90%" in text
    assert "| seed | arm | wall to 90% | CPU to 90% | env steps to 90% | budget (env steps) |" in text
    assert "- Command: `python benchmarks/time_to_skill.py`; commit" in text
    assert "- target: fast median <= 60 s with every seed reaching it: NOT met (issue 20)." in text
    assert "| 0 | fast | 40.0 s | 38.0 s | 600,000 | 1,500,000 | 120 s | 1.5 | 90% |" in text
    assert "| 3 | fast | not reached | - | - | 1,500,000 | 120 s | 1.5 | 90% |" in text
    assert "| fast | 50.0 s | 4/5 | 47.0 s | 700,000 | n/a (a median not reached) |" in text
    assert "| rsl_rl | not reached | 2/5 | not reached | not reached | reference |" in text


def test_the_benchmarked_env_takes_the_configs_task_overrides() -> None:
    """A recipe's ``task.env`` values reach the env the arms train in, as in ``robot-rl train``."""
    plain = ppo.task_env(compose(["task=so101_reach"]), 2, 0)
    short = ppo.task_env(compose(["task=so101_reach", "+task.env.episode_s=1.0"]), 2, 0)
    assert short.max_episode_steps < plain.max_episode_steps
    assert short.max_episode_steps == round(1.0 / short.dt)
