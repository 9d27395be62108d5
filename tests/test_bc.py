"""Behaviour cloning (``agent=bc`` driven by ``robot-rl bc``): loss goes down, the clone acts like the expert,
chunks, checkpoints, export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from expert_demos import record_expert_demos

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.bc import BC, load_clone
from robot_rl.cli import main
from robot_rl.commands.bc import Fit, fit
from robot_rl.compose import compose
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.errors import InputError
from robot_rl.train.evaluation import evaluate

SHORT = {"episode_s": 1.0}  # 25 control steps at 25 Hz


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 scripted-expert so101_reach episodes of 25 frames (real sim, real LeRobot files)."""
    return record_expert_demos(tmp_path_factory.mktemp("bc") / "reach", "so101_reach", 12, 4, 1, SHORT)


def clone(demos: Path, task: str, *overrides: str, epochs: int = 300, patience: int = 30) -> tuple[BC, Fit]:
    """agent=bc on ``demos`` for ``task``'s env, fitted as ``robot-rl bc`` fits it."""
    cfg = compose(["agent=bc", f"agent.demos={demos}", *overrides])
    torch.manual_seed(0)
    agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(sim.make_env(task, num_envs=1)))
    assert isinstance(agent, BC)
    return agent, fit(agent, epochs, patience)


def frame_mean(root: Path) -> np.ndarray:
    """The mean policy observation of a dataset's frames (what the clone's normaliser holds)."""
    return LeRobotDataset(root).column("observation.policy").astype(np.float64).mean(0)


def test_bc_reduces_loss_and_reproduces_the_expert(reach_demos: Path) -> None:
    agent, result = clone(reach_demos, "so101_reach", "agent.actor=deterministic", epochs=100, patience=100)
    first, best = result.history[0], result.best
    assert best["val/mse"] < first["val/mse"] / 5, (first, best)
    assert len(agent.train_rows) + len(agent.val_rows) == 300 and len(agent.val_rows) == 25  # one held-out episode
    # in the states the expert visits on fresh episodes (another seed), the clone's actions are the expert's
    env = sim.make_env("so101_reach", num_envs=8, seed=77, **SHORT)
    obs = env.reset(seed=77)
    policy, errors = agent.policy(), []
    for _ in range(20):
        target = env.expert_action()
        with torch.no_grad():
            errors.append((policy(obs["policy"]) - target).abs().mean().item())
        obs = env.step(target).obs
    assert float(np.mean(errors)) < 0.1, errors
    untrained, _ = clone(reach_demos, "so101_reach", "agent.actor=deterministic", "agent.actor_lr=1e-9", epochs=1)
    with torch.no_grad():
        untrained_error = (untrained.policy()(obs["policy"]) - env.expert_action()).abs().mean().item()
    assert untrained_error > 3 * float(np.mean(errors))


@pytest.mark.slow
def test_bc_lifts_some_cubes(tmp_path: Path) -> None:
    """Closed loop on so101_lift: 32 expert episodes cloned lift some cubes (0 without acting; ~25 s).

    Measured on 64 episodes: 30% with one torch thread, 47% with two (the thread count changes the float sums,
    so the fit); 16 demos gave 12% and 9%, too close to a threshold to be a check."""
    record("so101_lift", expert_policy, tmp_path / "lift", 32, "lift", num_envs=4, seed=2,
           only_success=True)
    agent, _ = clone(tmp_path / "lift", "so101_lift", "agent.actor=deterministic")
    env = sim.make_env("so101_lift", num_envs=16, seed=77)
    assert evaluate(agent.policy(), env, 64, seed=77).summary()["success_rate"] >= 8 / 64
    idle = evaluate(lambda obs: torch.zeros(obs.shape[0], 6), env, 64, seed=77).summary()["success_rate"]
    assert idle == 0.0


def test_chunked_windows_and_shapes(reach_demos: Path) -> None:
    agent, _ = clone(reach_demos, "so101_reach", "agent.actor=chunked", "agent.chunk_len=4", epochs=3, patience=3)
    rows = torch.arange(300)
    actions, mask = agent.demo_chunks(rows)
    assert actions.shape == (300, 4, 6) and mask.shape == (300, 4)
    # step k of frame t's window is frame t+k's action, inside the episode
    inside = torch.nonzero(mask[:, 3]).squeeze(1)
    for k in range(4):
        torch.testing.assert_close(actions[inside, k], actions[inside + k, 0], rtol=0, atol=0)
    last = torch.arange(24, 300, 25)  # the last frame of every 25-frame episode
    assert mask[last].tolist() == [[True, False, False, False]] * 12  # past the end: padded
    assert mask[last - 3].all() and int(mask.sum()) == 12 * (25 + 24 + 23 + 22)
    obs = agent.buffer.obs["policy"][:5, 0]
    assert agent.actor(agent.normalizers["policy"](obs)).shape == (5, 4, 6)
    assert agent.policy()(obs).shape == (5, 4 * 6) and agent.policy_chunking()[0] == 4  # the whole chunk


def test_cloning_loss_by_hand(reach_demos: Path) -> None:
    """Masked MSE over the chunk steps inside the episode, plus the gaussian's NLL of the first action."""
    agent, _ = clone(reach_demos, "so101_reach", "agent.actor=chunked", "agent.chunk_len=3", epochs=1)
    batch = agent.batch(torch.tensor([0, 24, 23]))  # 24: the episode's last frame (1 step), 23: 2 steps
    with torch.no_grad():
        err = (agent.actor(batch.obs) - batch.actions).pow(2).sum(-1)  # [3, 3]
        expected = (err[0].sum() + err[1, 0] + err[2, :2].sum()) / (6 * 6)
        torch.testing.assert_close(agent.loss(batch)[1], expected)
    gauss, _ = clone(reach_demos, "so101_reach", "agent.nll_weight=0.5", epochs=1)
    batch = gauss.batch(torch.tensor([3, 4]))
    with torch.no_grad():
        mean, log_std = gauss.actor.net(batch.obs).chunk(2, dim=-1)
        log_std = log_std.clamp(-5.0, 2.0)
        u = torch.atanh(batch.actions[:, 0].clamp(-0.999, 0.999))
        nll = (0.5 * ((u - mean) / log_std.exp()) ** 2 + log_std + 0.5 * np.log(2 * np.pi)).mean()
        mse = (torch.tanh(mean) - batch.actions[:, 0]).pow(2).mean()
        torch.testing.assert_close(gauss.loss(batch)[0], mse + 0.5 * nll)


def test_bc_command_checkpoint_export_eval_and_bad_input(reach_demos: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    assert main(["bc", str(reach_demos), "--out", str(out), "--actor", "chunked", "--chunk-len", "3",
                 "--epochs", "4", "--eval-episodes", "2"]) == 0
    printed = capsys.readouterr().out
    assert "bc (chunked, h=3)" in printed and json.loads(printed[printed.index("{"):])["episodes"] == 2
    assert json.loads((out / "eval.json").read_text())["episodes"] == 2
    import yaml

    assert yaml.safe_load((out / "policy" / "policy.yaml").read_text())["chunk_length"] == 3  # the whole chunk
    assert main(["eval", str(out / "policy"), "--episodes", "2", "--num-envs", "2"]) == 0
    # the run directory is an ordinary run: the checkpoint reads back into the clone the artifact holds
    clone_ = load_clone(out, 21, 6)
    assert clone_.cfg.chunk_len == 3 and clone_.cfg.actor == "chunked"
    import onnxruntime as ort

    obs = torch.randn(7, 21)
    onnx_out = ort.InferenceSession(str(out / "policy" / "policy.onnx")).run(None, {"obs": obs.numpy()})[0]
    env = sim.make_env("so101_reach", num_envs=1)
    with torch.no_grad():  # joint targets = default + scale * action, every chunk step
        chunk = clone_.actor(clone_.normalizer(obs))  # [7, 3, 6]
        expected = env.default_joint_pos + env.robot.control.action_scale * chunk
    np.testing.assert_allclose(onnx_out, expected.flatten(1).numpy(), atol=1e-5)
    np.testing.assert_allclose(clone_.normalizer.mean.numpy(), frame_mean(reach_demos), rtol=1e-5, atol=1e-6)
    assert main(["eval", str(out), "--episodes", "2", "--num-envs", "2"]) == 0  # the run dir itself
    assert main(["bc", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "not a LeRobot dataset" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"agent\.actor"):
        compose(["agent=bc", "agent.actor=transformer"])
    with pytest.raises(InputError, match=r"agent\.chunk_len"):
        compose(["agent=bc", "agent.actor=gaussian", "agent.chunk_len=4"])
    with pytest.raises(ValueError, match="not a `robot-rl bc` run"):
        load_clone(tmp_path, 21, 6)
    with pytest.raises(ValueError, match="other observation or action sizes"):
        load_clone(out, 20, 6)
