"""benchmarks/vla_rl.py: the SFT run's task and cameras, the curve from a metrics log, the table and plot from
hand-made rows (RL beside the SFT figure it started from, as a ratio)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bench_scripts import load

from robot_rl.data.lerobot.meta import DEFAULT_FEATURES, DatasetInfo, Feature

bench = load("vla_rl")


def summary(rate: float, ci: list[float]) -> dict:
    return {"episodes": 100, "success_rate": rate, "success_ci95": ci, "success_by_target": {}}


def row(seed: int, rl: float) -> dict:
    return {"method": "dsrl", "critic": "ensemble_ln", "sft_run": "/x/so101_reach_lang-dart", "seed": seed,
            "env_steps": 100_000, "train_wall_s": 1800.0, "named": summary(rl, [rl - 0.1, rl + 0.08]),
            "wrong_instruction": summary(0.0, [0.0, 0.04]), "sft": {"named": summary(0.56, [0.46, 0.65])},
            "curve": [{"step": 6400, "wall_s": 60.0, "success": 0.5}, {"step": 12800, "wall_s": 120.0,
                                                                        "success": 0.7}]}


def test_the_table_puts_rl_beside_its_sft_policy_as_a_ratio(tmp_path: Path) -> None:
    meta = {"command": "python benchmarks/vla_rl.py --policy x", "commit": "abcdef0123", "date": "2026-12-03T22:00"}
    text = bench.table([row(0, 0.84), row(1, 0.7)], [meta])
    lines = [x for x in text.splitlines() if x.startswith("| dsrl")]
    assert lines[0] == ("| dsrl | ensemble_ln | - | `so101_reach_lang-dart` | 0 | 100,000 | 30.0 min | 56% [46-65] | "
                        "84% [74-92] | 1.50x | 0% [0-4] |")
    assert "| 1.25x |" in lines[1]
    assert "- `python benchmarks/vla_rl.py --policy x` (commit abcdef0, 2026-12-03)" in text
    # the two seeds share a configuration: one line with each seed's evaluation, their mean and mean / SFT; a row
    # naming the agent's default critic (ensemble_ln for dsrl) is grouped with one that left it to the agent
    default = {**row(1, 0.7), "critic": "agent's default"}
    assert ("| dsrl | `so101_reach_lang-dart` | 56% [46-65] | 2 | 84%, 70% | 77% | 1.38x |"
            in bench.table([row(0, 0.84), default], [meta]).splitlines())
    mlp = {**row(1, 0.7), "critic": "mlp"}
    assert "| dsrl critic=mlp | `so101_reach_lang-dart` | 56% [46-65] | 1 | 70% | 70% | 1.25x |" in bench.table(
        [row(0, 0.84), mlp], [meta]).splitlines()
    # two trainings of one SFT command under one run name: both figures shown, the ratio to their mean
    retrained = {**row(1, 0.7), "sft": {"named": summary(0.64, [0.54, 0.73])}}
    assert ("| dsrl | `so101_reach_lang-dart` | 56% [46-65] / 64% [54-73] | 2 | 84%, 70% | 77% | 1.28x |"
            in bench.table([row(0, 0.84), retrained], [meta]).splitlines())
    other = {**row(2, 0.6), "agent": ["init_alpha=0.1"], "critic": "agent's default"}
    assert "| dsrl init_alpha=0.1 | `so101_reach_lang-dart` | 56% [46-65] | 1 | 60% | 60% | 1.07x |" in bench.table(
        [row(0, 0.84), other], [meta]).splitlines()
    bench.plot([row(0, 0.84)], tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_the_curve_and_the_sft_runs_facts_are_read_from_the_run(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 100, "perf/wall_s": 3.04, "episode/success": 0.25}, {"step": 200, "perf/wall_s": 6.0}]) + "\n")
    assert bench.curve(tmp_path) == [{"step": 100, "wall_s": 3.0, "success": 0.25},
                                     {"step": 200, "wall_s": 6.0, "success": None}]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"task": {"name": "so101_reach_lang", "env": {"cameras": ["front", "top"]}}, "agent": {"dataset": "/d"}}))
    assert bench.sft_facts(tmp_path) == ("so101_reach_lang", ["front", "top"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "so101_reach"}, "agent": {"lr": 1}}))
    with pytest.raises(SystemExit, match="not an agent=vla run"):
        bench.sft_facts(tmp_path)


def test_each_method_trains_its_agent_with_the_critic_asked_for() -> None:
    assert bench.agent_args("dsrl", None) == ["agent=vla_rl", "agent.method=dsrl"]
    assert bench.agent_args("best_of_n", "ensemble") == ["agent=vla_rl", "agent.method=best_of_n", "critic=ensemble"]
    assert bench.agent_args("flow_ppo", None) == ["agent=vla_ppo"]
    assert bench.agent_args("q_guided", None) == ["agent=vla_guided"]
    assert set(bench.METHODS) == {"dsrl", "best_of_n", "flow_ppo", "q_guided"}


def test_the_sft_evaluation_is_reused_only_for_the_same_checkpoint_and_settings(tmp_path: Path) -> None:
    import argparse

    run = tmp_path / "sft"
    (run / "checkpoints" / "step_000000000010").mkdir(parents=True)
    (run / "checkpoints" / "step_000000000010" / "model.safetensors").write_bytes(b"x")
    args = argparse.Namespace(policy=run, runs=tmp_path / "runs", episodes=100, eval_envs=25, eval_seed=1000,
                              fresh_sft_eval=False)
    args.runs.mkdir()
    calls = []

    def evaluate(policy, a, env, log):
        calls.append(policy)
        return {"named": summary(0.5 + 0.1 * len(calls), [0.4, 0.7]), "wrong_instruction": summary(0.0, [0.0, 0.1])}

    first = bench.sft_evaluation(args, {}, evaluate)
    assert bench.sft_evaluation(args, {}, evaluate) == first and len(calls) == 1  # reused
    args.episodes = 50
    assert bench.sft_evaluation(args, {}, evaluate)["named"]["success_rate"] == pytest.approx(0.7)  # new settings
    (run / "checkpoints" / "step_000000000020").mkdir()
    (run / "checkpoints" / "step_000000000020" / "model.safetensors").write_bytes(b"y")
    bench.sft_evaluation(args, {}, evaluate)
    assert len(calls) == 3  # a newer checkpoint
    args.fresh_sft_eval = True
    bench.sft_evaluation(args, {}, evaluate)
    assert len(calls) == 4


def test_a_baseline_run_is_evaluated_like_the_sft_policy_and_tabled_apart(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "so101_reach_lang-2xdemos"
    (run / "dataset_meta" / "meta").mkdir(parents=True)
    features = {k: Feature.from_json(k, v) for k, v in DEFAULT_FEATURES.items()}
    info = DatasetInfo(fps=10, features=features, total_episodes=200)
    (run / "dataset_meta" / "meta" / "info.json").write_text(json.dumps(info.to_json()))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 4000, "perf/wall_s": 400.0}, {"step": 8000, "perf/wall_s": 810.04}]) + "\n")
    seen = []
    monkeypatch.setattr(bench, "evaluation", lambda r, args, env, log: seen.append(r) or {
        "named": summary(0.75, [0.66, 0.82]), "wrong_instruction": summary(0.01, [0.0, 0.05])})
    args = type("Args", (), {"eval_seed": 1000, "runs": tmp_path})()
    got = bench.baseline_row(run, args, {})
    assert seen == [run] and got["demos"] == 200 and got["gradient_steps"] == 8000 and got["train_wall_s"] == 810.0
    assert got["method"] == bench.BASELINE and got["named"]["success_rate"] == 0.75
    text = bench.table([row(0, 0.84), got], [{"command": "c", "commit": "abcdef0", "date": "2026-12-05"}])
    assert "| `so101_reach_lang-2xdemos` | 200 | 8,000 | 13.5 min | 75% [66-82] | 1% [0-5] |" in text
    # the baseline is neither a seed's row nor a configuration's
    assert len([x for x in text.splitlines() if x.startswith("| dsrl | ensemble_ln |")]) == 1
    assert len([x for x in text.splitlines() if x.startswith("| dsrl | `")]) == 1
    bench.plot([row(0, 0.84), got], tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000
