"""``init_from=<run dir>``: a new run starts from another run's newest checkpoint (fine-tuning under new overrides).

The new run takes the agent (networks, normaliser, optimiser) and nothing else: its own config, step counter from 0,
its own checkpoints; an off-policy agent's replay buffer (transitions of the old rewards) is left behind; the source
run is not touched. Refusals (no checkpoint, another network shape, with ``resume=``): tests/fuzz_cases_checkpoint.py.
"""

import hashlib
import shutil

import pytest
import torch
from pendulum_vecenv import PendulumVecEnv
from test_checkpoint import OVERRIDES, toy_factory

from robot_rl.commands.train import check_overrides
from robot_rl.compose import compose
from robot_rl.config.io import load_train_config
from robot_rl.errors import InputError
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")


def _digests(run):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*")) if p.is_file()}


def _params(agent):
    modules = agent.networks().values()
    return torch.cat([x.detach().reshape(-1) for m in modules for x in [*m.parameters(), *m.buffers()]])


def test_ppo_fine_tunes_from_another_runs_weights_under_its_own_config(tmp_path, capsys):
    source = tmp_path / "source"
    trained = Runner(compose([*OVERRIDES, "task.total_steps=512"]), source, env_factory=toy_factory)
    trained.learn(evaluate_and_export=False)
    before = _digests(source)

    cfg = compose([*OVERRIDES, "task.total_steps=256", "agent.learning_rate=1e-4", f"init_from={source}"])
    tuned = Runner(cfg, tmp_path / "tuned", env_factory=toy_factory)
    assert "starting from the weights of" in capsys.readouterr().err
    torch.testing.assert_close(_params(tuned.agent), _params(trained.agent), rtol=0, atol=0)
    assert (tuned.env_steps, tuned.updates) == (0, 0)
    result = tuned.learn(evaluate_and_export=False)
    assert (result.env_steps, result.updates) == (256, 2)  # its own budget, counted from 0
    assert not torch.equal(_params(tuned.agent), _params(trained.agent))
    saved = load_train_config(tmp_path / "tuned" / "config.yaml")
    assert saved.init_from == str(source) and saved.agent.learning_rate == 1e-4
    assert [p.name for p in (tmp_path / "tuned" / "checkpoints").iterdir()] == ["step_000000000256"]
    assert _digests(source) == before

    # resuming the fine-tuned run continues it (its own checkpoint), it does not start over from the source, which
    # it no longer needs
    shutil.rmtree(source)
    with pytest.raises(InputError) as refused:  # toy_reach is this suite's task, not sim's: checked after init_from
        check_overrides([f"resume={tmp_path / 'tuned'}"])
    assert refused.value.key == "task.name"
    resumed = Runner(saved, tmp_path / "tuned", env_factory=toy_factory, resume=True)
    assert resumed.env_steps == 256
    torch.testing.assert_close(_params(resumed.agent), _params(tuned.agent), rtol=0, atol=0)


def test_sac_takes_the_networks_and_leaves_the_replay_buffer(tmp_path):
    common = ["agent=sac", "critic=ensemble", "critic.hidden_dims=[16,16]", "agent.actor_hidden_dims=[16,16]",
              "agent.learning_starts=40", "agent.batch_size=16", "agent.iteration_steps=80", "logger=none",
              "logger.progress=false"]
    source = Runner(compose([*common, "task.num_envs=4", "task.total_steps=160"]), tmp_path / "source",
                    env_factory=lambda n, s: PendulumVecEnv(n, seed=s))
    source.learn(evaluate_and_export=False)
    assert source.agent.buffer.size > 0
    tuned = Runner(compose([*common, "task.num_envs=2", "task.total_steps=80", f"init_from={tmp_path / 'source'}"]),
                   tmp_path / "tuned", env_factory=lambda n, s: PendulumVecEnv(n, seed=s))
    assert tuned.agent.buffer.size == 0  # another env count, and the old rewards: collected afresh
    obs = {"policy": torch.randn(5, 3)}
    torch.testing.assert_close(tuned.agent.act(obs, True), source.agent.act(obs, True))
    torch.testing.assert_close(_params(tuned.agent), _params(source.agent), rtol=0, atol=0)
