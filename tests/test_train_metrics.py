"""Off-policy metrics stay device tensors through the updates and are converted once per log interval, to the
very numbers the per-update ``float()`` gave (the old path, rebuilt here from every learning step)."""

import json

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv

from robot_rl.compose import compose
from robot_rl.train import runner as runner_module
from robot_rl.train.metrics_log import MetricLogger, scalars
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")


def test_scalars_converts_tensors_in_place_of_the_key_and_leaves_numbers_alone():
    metrics = {"a": torch.tensor(0.1, dtype=torch.float64), "n": 3, "b": torch.tensor([2.5]), "c": 1.25}
    out = scalars(metrics)
    assert list(out) == ["a", "n", "b", "c"] and out == {"a": 0.1, "n": 3, "b": 2.5, "c": 1.25}
    assert all(type(out[k]) is float for k in "abc") and type(out["n"]) is int


@pytest.mark.parametrize("agent, extra", [
    ("sac", []), ("td3", []), ("chunked_td3", ["critic=chunked", "critic.chunk_len=3"]),
    ("tdmpc", ["agent.act_with=policy", "critic.latent_dim=8", "agent.horizon=2"]),
])
def test_logged_metrics_equal_the_per_update_float_path(tmp_path, monkeypatch, agent, extra):
    cfg = compose([
        f"agent={agent}", "critic.hidden_dims=[16]", "agent.actor_hidden_dims=[16]", "agent.learning_starts=64",
        "agent.utd_ratio=0.5", "agent.batch_size=32", "agent.iteration_steps=96", "task.total_steps=384",
        "task.num_envs=4", "logger=none", "logger.progress=false", *extra,
    ])
    logged_at: list[int] = []  # update calls made before each log line

    class Recorder(MetricLogger):
        def log(self, metrics, step):
            logged_at.append(len(calls))
            super().log(metrics, step)

    monkeypatch.setattr(runner_module, "MetricLogger", Recorder)
    runner = Runner(cfg, tmp_path, env_factory=lambda n, seed: PendulumVecEnv(n, seed=seed))
    learner, learn, update = runner.agent, runner.agent.learn, runner.agent.update
    calls: list[tuple[list[dict[str, float]], float]] = []  # per update call: float metrics of each step, updates
    steps: list[dict[str, float]] = []
    tensor_keys: set[str] = set()

    def recording_learn(*batch):
        metrics = learn(*batch)
        tensor_keys.update(k for k, v in metrics.items() if isinstance(v, torch.Tensor))
        steps.append({k: float(v) for k, v in metrics.items()})  # what the old code stored
        return metrics

    def recording_update():
        steps.clear()
        out = update()
        calls.append((list(steps), out["train/updates"]))
        return out

    monkeypatch.setattr(learner, "learn", recording_learn)
    monkeypatch.setattr(learner, "update", recording_update)
    runner.learn(evaluate_and_export=False)

    assert "loss/actor" in tensor_keys  # the agent's own metrics stay tensors between updates (no sync)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == len(logged_at) == 4 and logged_at[-1] == len(calls) > 20
    first = 0
    for line, last in zip(lines, logged_at, strict=True):
        sums: dict[str, float] = {}  # the old path: floats summed per update call, then per log interval
        for call_steps, updates in calls[first:last]:
            per_call: dict[str, float] = {}
            for step in call_steps:
                for k, v in step.items():
                    per_call[k] = per_call.get(k, 0.0) + v
            per_call = {k: v / max(len(call_steps), 1) for k, v in per_call.items()}
            per_call["train/updates"] = updates
            for k, v in per_call.items():
                sums[k] = sums.get(k, 0.0) + v
        expected = {k: v / max(last - first, 1) for k, v in sums.items()}
        assert expected and {k: line[k] for k in expected} == expected  # exactly equal, not approximately
        first = last
