"""Runner: one loop for on- and off-policy agents. Iterations end where the agent says (PPO: every update; off-policy:
every ``iteration_steps`` transitions and at the run's end); a tiny SAC run writes logs and checkpoints; resume
continues counters, buffer, optimiser; evaluation and export at the end."""

import json

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv
from test_checkpoint import OVERRIDES, toy_factory

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint
from robot_rl.compose import compose
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(total_steps: int):
    return compose([
        "agent=sac", "critic=ensemble", "critic.hidden_dims=[32,32]", "agent.actor_hidden_dims=[32,32]",
        "agent.learning_starts=200", "agent.utd_ratio=0.25", "agent.batch_size=64", "agent.iteration_steps=400",
        f"task.total_steps={total_steps}", "task.num_envs=4", "checkpoint_interval=2", "logger=none",
        "logger.progress=false",
    ])


def _factory(num_envs, seed):
    return PendulumVecEnv(num_envs, seed=seed)


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_on_policy_iterations_are_updates_and_the_unfinished_rollout_is_not_logged(tmp_path):
    # rollouts of 8 steps x 16 envs = 128 transitions; 600 steps = 4 rollouts + 88 transitions (6 vector steps)
    cfg = compose([*OVERRIDES, "task.total_steps=600"])
    result = Runner(cfg, tmp_path, env_factory=toy_factory).learn(evaluate_and_export=False)
    assert (result.env_steps, result.updates) == (608, 4)
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [128, 256, 384, 512]
    assert all("loss/value" in r and "perf/collect_s" in r for r in rows)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step_000000000256", "step_000000000512", "step_000000000608"]  # every 2 iterations, and the end


def test_off_policy_iteration_rule_by_hand():
    env = PendulumVecEnv(4)  # the rule is the agent's: no runner needed
    agent = make_agent(_cfg(400).agent, _cfg(400).critic, EnvSpec.from_env(env))
    assert not agent.iteration_done(396, updated=True, final=False)
    assert agent.iteration_done(400, updated=False, final=False)  # iteration_steps=400, with or without an update
    assert agent.iteration_done(4, updated=False, final=True)  # the run's last steps
    big = make_agent(compose(["agent=sac", "agent.iteration_steps=1"]).agent, _cfg(400).critic, EnvSpec.from_env(env))
    assert big.iteration_done(4, updated=False, final=False)  # at least one vector step: never 0 transitions


def test_run_logs_checkpoints_and_resumes_where_it_stopped(tmp_path):
    runner = Runner(_cfg(2000), tmp_path, env_factory=_factory)
    result = runner.learn(evaluate_and_export=False)
    assert (result.env_steps, result.updates) == (2000, 5)  # 5 iterations of 400 transitions
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and "loss/critic_loss" in str(lines[-1]) and "episode/return" in str(lines[-1])
    agent = runner.agent
    assert agent.updates == 451  # utd 0.25 x (2000 - 200 + 4): the step reaching learning_starts counts
    step, _ = load_checkpoint(latest_checkpoint(tmp_path))
    assert step == 2000

    resumed = Runner(_cfg(2800), tmp_path, env_factory=_factory, resume=True)
    a = resumed.agent
    assert (resumed.env_steps, resumed.updates, a.updates, a.env_steps) == (2000, 5, 451, 2000)
    assert a.buffer.size == agent.buffer.size == 500
    torch.testing.assert_close(a.buffer.obs["policy"], agent.buffer.obs["policy"])
    saved_opt = agent.critic_optimizer.state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(a.critic_optimizer.state_dict()["state"][0]["exp_avg"], saved_opt)
    obs = torch.randn(3, 3)
    torch.testing.assert_close(a.act({"policy": obs}, True), agent.act({"policy": obs}, True))
    result = resumed.learn(evaluate_and_export=False)
    assert (result.env_steps, result.updates, a.updates) == (2800, 7, 651)

    # robot-rl eval / critic-report open a run with their own env count: the replay buffer (laid out per
    # training env) is left behind, the networks are restored
    inspected = Runner(_cfg(2800), tmp_path, env_factory=_factory, resume=True, num_envs=3)
    assert inspected.env.num_envs == 3 and inspected.agent.buffer.size == 0
    torch.testing.assert_close(inspected.agent.act({"policy": obs}, True), a.act({"policy": obs}, True))


def test_sac_run_on_so101_reach_evaluates_and_exports_a_policy_artifact(tmp_path):
    cfg = compose([
        "agent=sac", "critic=ensemble", "critic.hidden_dims=[32,32]", "agent.actor_hidden_dims=[32,32]",
        "agent.learning_starts=400", "agent.utd_ratio=0.02", "agent.batch_size=64", "agent.iteration_steps=400",
        "task.total_steps=800", "task.num_envs=8", "eval_episodes=2", "logger=none", "logger.progress=false",
    ])
    result = Runner(cfg, tmp_path).learn()
    assert result.env_steps == 800 and result.eval["episodes"] == 2
    assert (tmp_path / "eval.json").is_file()
    assert {p.name for p in result.artifact.iterdir()} >= {"policy.onnx", "policy.pt", "policy.yaml"}


def test_a_run_on_a_task_without_a_robot_skips_export_and_says_so(tmp_path, capsys):
    cfg = compose([
        "task.name=half_cheetah", "agent=sac", "critic.hidden_dims=[16]", "agent.actor_hidden_dims=[16]",
        "agent.learning_starts=32", "agent.utd_ratio=0.05", "agent.batch_size=16", "agent.iteration_steps=64",
        "task.total_steps=128", "task.num_envs=2", "eval_episodes=1", "+task.env.max_episode_steps=20",
        "logger=none", "logger.progress=false",
    ])
    result = Runner(cfg, tmp_path).learn()
    assert result.env_steps == 128 and result.eval["episodes"] == 1 and result.artifact is None
    assert "export skipped: task 'half_cheetah' has no robot" in capsys.readouterr().out
    assert not (tmp_path / "policy").exists()


def test_a_policy_observing_sim_only_state_skips_export_and_says_so(tmp_path, capsys):
    cfg = compose([
        "task.name=so101_reach_lang", "agent=sac", "critic.hidden_dims=[16]", "agent.actor_hidden_dims=[16]",
        "agent.learning_starts=32", "agent.utd_ratio=0.05", "agent.batch_size=16", "agent.iteration_steps=64",
        "task.total_steps=64", "task.num_envs=2", "eval_episodes=1", "logger=none", "logger.progress=false",
    ])
    result = Runner(cfg, tmp_path).learn()
    assert result.eval["episodes"] == 1 and result.artifact is None
    assert "export skipped: the policy of task 'so101_reach_lang' observes ['targets_pos'" in capsys.readouterr().out
