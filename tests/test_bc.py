"""Behaviour cloning from recorded demos: loss goes down, the clone acts like the expert, chunks, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from expert_demos import record_expert_demos

import sim
from robot_rl.cli import main
from robot_rl.demos.bc import BCConfig, BCPolicy, BCResult, export_bc, load_bc, load_demo_arrays, save_bc, train_bc
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.train.evaluation import evaluate

SHORT = {"episode_s": 1.0}  # 25 control steps at 25 Hz


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 scripted-expert so101_reach episodes of 25 frames (real sim, real LeRobot files)."""
    return record_expert_demos(tmp_path_factory.mktemp("bc") / "reach", "so101_reach", 12, 4, 1, SHORT)


def test_bc_reduces_loss_and_reproduces_the_expert(reach_demos: Path) -> None:
    torch.manual_seed(0)
    result = train_bc(reach_demos, BCConfig(actor="deterministic", epochs=100, patience=100), progress=False)
    first, best = result.history[0], result.best
    assert best["val_mse"] < first["val_mse"] / 5, (first, best)
    assert result.train_frames + result.val_frames == 300 and result.val_frames == 25  # one held-out episode
    # in the states the expert visits on fresh episodes (another seed), the clone's actions are the expert's
    env = sim.make_env("so101_reach", num_envs=8, seed=77, **SHORT)
    obs = env.reset(seed=77)
    policy, errors = load_policy(result), []
    for _ in range(20):
        target = env.expert_action()
        with torch.no_grad():
            errors.append((policy(obs["policy"]) - target).abs().mean().item())
        obs = env.step(target).obs
    assert float(np.mean(errors)) < 0.1, errors
    untrained = train_bc(reach_demos, BCConfig(actor="deterministic", epochs=1, lr=1e-9), progress=False)
    with torch.no_grad():
        untrained_error = (load_policy(untrained)(obs["policy"]) - env.expert_action()).abs().mean().item()
    assert untrained_error > 3 * float(np.mean(errors))


@pytest.mark.slow
def test_bc_lifts_some_cubes(tmp_path: Path) -> None:
    """Closed loop on so101_lift: 16 expert episodes cloned lift some cubes (0 without acting; ~50 s)."""
    record("so101_lift", expert_policy, tmp_path / "lift", 16, "lift", num_envs=4, seed=2,
           only_success=True)
    result = train_bc(tmp_path / "lift", BCConfig(actor="deterministic"), progress=False)
    env = sim.make_env("so101_lift", num_envs=16, seed=77)
    assert evaluate(load_policy(result), env, 32, seed=77).summary()["success_rate"] >= 2 / 32
    idle = evaluate(lambda obs: torch.zeros(obs.shape[0], 6), env, 32, seed=77).summary()["success_rate"]
    assert idle == 0.0


def load_policy(result: BCResult) -> BCPolicy:
    return BCPolicy(result.normalizer, result.actor).eval()


def test_chunked_windows_and_shapes(reach_demos: Path) -> None:
    cfg = BCConfig(actor="chunked", chunk_len=4, epochs=3, patience=3)
    data = load_demo_arrays(reach_demos, cfg)
    assert data.obs.shape == (300, 21) and data.actions.shape == (300, 4, 6) and data.mask.shape == (300, 4)
    # step k of frame t's window is frame t+k's action, inside the episode
    inside = np.flatnonzero(data.mask[:, 3])
    for k in range(4):
        np.testing.assert_array_equal(data.actions[inside, k], data.actions[inside + k, 0])
    ends = np.flatnonzero(np.diff(data.episode)) + 1  # first frame of every later episode
    last = np.r_[ends - 1, len(data.episode) - 1]
    assert data.mask[last].tolist() == [[True, False, False, False]] * 12  # past the end: padded
    assert data.mask[last - 3].all() and data.mask.sum() == 12 * (25 + 24 + 23 + 22)
    result = train_bc(reach_demos, cfg, progress=False)
    obs = torch.as_tensor(data.obs[:5])
    assert result.actor(result.normalizer(obs)).shape == (5, 4, 6)
    assert load_policy(result)(obs).shape == (5, 6)


def test_checkpoint_round_trip_export_and_eval(reach_demos: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    result = train_bc(reach_demos, BCConfig(actor="gaussian", epochs=5, patience=5), progress=False)
    save_bc(result, tmp_path / "bc")
    loaded = load_bc(tmp_path / "bc")
    assert loaded.meta["task"] == "so101_reach" and loaded.meta["best_epoch"] == result.best_epoch
    obs = torch.randn(7, 21)
    with torch.no_grad():
        np.testing.assert_array_equal(loaded.policy()(obs).numpy(), load_policy(result)(obs).numpy())
    np.testing.assert_allclose(loaded.normalizer.mean.numpy(), load_demo_arrays(reach_demos, BCConfig()).obs_mean)
    artifact = export_bc(loaded, tmp_path / "policy", "so101_reach")
    import onnxruntime as ort

    onnx_out = ort.InferenceSession(str(artifact / "policy.onnx")).run(None, {"obs": obs.numpy()})[0]
    env = sim.make_env("so101_reach", num_envs=1)
    with torch.no_grad():  # joint targets = default + scale * action
        expected = env.default_joint_pos + env.robot.control.action_scale * loaded.policy()(obs)
    np.testing.assert_allclose(onnx_out, expected.numpy(), atol=1e-5)
    assert main(["eval", str(artifact), "--episodes", "2", "--num-envs", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2


def test_bc_command_and_bad_input(reach_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    assert main(["bc", str(reach_demos), "--out", str(out), "--actor", "chunked", "--chunk-len", "3",
                 "--epochs", "4", "--eval-episodes", "2"]) == 0
    printed = capsys.readouterr().out
    assert "bc (chunked, h=3)" in printed and json.loads(printed[printed.index("{"):])["episodes"] == 2
    assert load_bc(out).cfg.chunk_len == 3
    import yaml

    assert yaml.safe_load((out / "policy" / "policy.yaml").read_text())["chunk_length"] == 3  # the whole chunk
    assert main(["eval", str(out / "policy"), "--episodes", "2", "--num-envs", "2"]) == 0
    assert main(["bc", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "not a LeRobot dataset" in capsys.readouterr().err
    with pytest.raises(ValueError, match="actor must be one of"):
        BCConfig(actor="transformer")
    with pytest.raises(ValueError, match="chunk_len=4: use chunk_len >= 1 with actor=chunked"):
        BCConfig(actor="gaussian", chunk_len=4)
    with pytest.raises(KeyError, match=r"no feature 'observation\.critic'"):
        load_demo_arrays(reach_demos, BCConfig(obs_key="observation.critic"))
    with pytest.raises(FileNotFoundError, match="not a BC checkpoint"):
        load_bc(tmp_path)
