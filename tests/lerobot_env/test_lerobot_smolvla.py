"""The LeRobot layer (marker ``lerobot``): a tiny SmolVLA built offline (tests/lerobot_env/tiny_smolvla.py), trained
with LeRobot's own loss on a ``robot-rl record`` dataset (so101_reach_lang, front camera 64x64) read by LeRobot's own
``LeRobotDataset``, saved with ``save_pretrained``, loaded through
:class:`robot_rl.models.vla.lerobot_policy.LeRobotPolicy` and evaluated in our sim by ``robot-rl vla-lerobot-eval``.
Runs in the venv of ``bash .ci/setup_lerobot``: ``python -m pytest -m lerobot tests/lerobot_env`` (docs/vla.md);
skipped where lerobot is not importable. Success is not expected from a few training steps: the loop, shapes, ranges
and the mapping to LeRobot's own call are.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot", reason="needs LeRobot 0.6.1 (bash .ci/setup_lerobot, then run in that venv)")

from tiny_smolvla import CHUNK, STEPS, frames, open_dataset

from robot_rl.deploy.actions import to_raw
from robot_rl.errors import InputError
from robot_rl.models.vla.lerobot_policy import LeRobotPolicy, check_policy_dir

pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_thread")]
ROOT = Path(__file__).resolve().parents[2]


def test_training_with_lerobot_lowers_the_loss_and_saves_a_policy_dir(made):
    _, policy_dir, losses = made
    assert len(losses) == STEPS and np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses
    config = check_policy_dir(policy_dir)
    assert config["type"] == "smolvla" and config["chunk_size"] == CHUNK
    assert sorted(p.name for p in policy_dir.iterdir()) == [
        "config.json", "model.safetensors", "policy_postprocessor.json",
        "policy_postprocessor_step_0_unnormalizer_processor.safetensors", "policy_preprocessor.json",
        "policy_preprocessor_step_5_normalizer_processor.safetensors"]


def test_adapter_is_lerobots_own_call_mapped_to_env_actions(made, spec):
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    dataset_root, policy_dir, _ = made
    images, texts, state = frames(dataset_root, [0, 150, 399])
    policy = LeRobotPolicy.load(policy_dir, action_spec=spec)
    assert (policy.cameras, policy.chunk_len, policy.action_dim, policy.state_dim) == (("front",), CHUNK, 6, 6)
    noise = torch.randn(3, CHUNK, 6, generator=torch.Generator().manual_seed(0))
    chunk = policy.act(images, texts, state, noise)
    assert chunk.shape == (3, CHUNK, 6) and torch.isfinite(chunk).all() and chunk.abs().max() <= 1.0
    assert torch.equal(chunk, policy.act(images, texts, state, noise))  # deterministic given the noise
    assert not torch.allclose(chunk, policy.act(images, texts, state))  # zeros: another chunk

    # the same inputs through LeRobot alone: joint targets; ours are their raw actions under the robot's map
    config = PreTrainedConfig.from_pretrained(policy_dir)
    lerobot_policy = SmolVLAPolicy.from_pretrained(policy_dir, config=config)
    pre, post = make_pre_post_processors(config, pretrained_path=str(policy_dir))
    batch = {"observation.images.front": images["front"].float() / 255, "observation.state": state, "task": texts}
    padded = torch.cat([noise, torch.zeros(3, CHUNK, 2)], dim=-1)  # max_action_dim 8
    targets = post(lerobot_policy.predict_action_chunk(pre(batch), noise=padded))
    np.testing.assert_allclose(chunk.numpy(), to_raw(spec, targets.double().numpy()), atol=1e-5)
    as_env_action = LeRobotPolicy.load(policy_dir).act(images, texts, state, noise)  # no spec: taken as [-1, 1]
    np.testing.assert_allclose(as_env_action.numpy(), targets.clamp(-1, 1).numpy(), atol=1e-6)


def test_joint_target_map_inverts_what_the_recorder_stored(made, spec):
    ds = open_dataset(made[0], 25, 1)
    rows = [ds[i] for i in range(0, 400, 7)]
    targets = torch.stack([r["action"][0] for r in rows]).double().numpy()
    policy_actions = torch.stack([r["action.policy"] for r in rows]).numpy()
    inside = (np.abs(policy_actions) < 0.999).all(axis=1)  # the clip (and the joint limits) hide the rest
    assert inside.sum() > 20
    np.testing.assert_allclose(to_raw(spec, targets)[inside], policy_actions[inside], atol=1e-4)


def test_adapter_refuses_bad_inputs(made):
    dataset_root, policy_dir, _ = made
    images, texts, state = frames(dataset_root, [0, 1])
    policy = LeRobotPolicy.load(policy_dir)
    with pytest.raises(InputError, match=r"images.front: camera missing"):
        policy.act({}, texts, state)
    with pytest.raises(InputError, match="must be uint8"):
        policy.act({"front": images["front"].float()}, texts, state)
    with pytest.raises(InputError, match="non-empty instruction"):
        policy.act(images, ["", texts[1]], state)
    with pytest.raises(InputError, match=r"state must be \[B, 6\]"):
        policy.act(images, texts, state[:, :5])
    with pytest.raises(InputError, match=r"noise = \(2, 8, 8\): must be \[2, 8, 6\]"):
        policy.act(images, texts, state, torch.zeros(2, CHUNK, 8))


def test_backbone_not_on_this_machine_is_refused_without_download(made, tmp_path):
    bad = tmp_path / "policy"
    shutil.copytree(made[1], bad)
    config = json.loads((bad / "config.json").read_text())
    config["vlm_model_name"] = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"vlm_model_name = 'HuggingFaceTB/SmolVLM2-500M-Video-Instruct'.*hub is off"):
        LeRobotPolicy.load(bad)


def test_weights_that_do_not_load_are_refused(made, tmp_path):
    bad = tmp_path / "policy"
    shutil.copytree(made[1], bad)
    (bad / "model.safetensors").write_bytes((made[1] / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(InputError, match=r"model.safetensors: does not load into the policy config.json describes"):
        LeRobotPolicy.load(bad)


def run_cli(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", "vla-lerobot-eval", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_cli_evaluates_in_batched_sim_with_success_per_instruction(made):
    out = run_cli(made[1], "--task", "so101_reach_lang", "--episodes", 3, "--num-envs", 3, "--execute-len", 4)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["episodes"] == 3 and summary["actions_finite_in_range"]
    assert summary["length_mean"] == 100  # so101_reach_lang: 4 s at 25 Hz, success does not end an episode
    assert summary["queries"] == 100 // 4  # the 3 envs re-plan together every 4 steps: one batched call
    assert sum(n for _, n in summary["success_by_instruction"].values()) == 3
    assert set(summary["success_by_target"]) <= {"red", "green", "blue", "yellow"}


def test_cli_refuses_a_directory_without_weights(made, tmp_path):
    bad = tmp_path / "policy"
    shutil.copytree(made[1], bad)
    (bad / "model.safetensors").unlink()
    out = run_cli(bad)
    assert out.returncode == 2 and "model.safetensors: file missing from the LeRobot policy directory" in out.stderr
    assert "Traceback" not in out.stderr
