"""A LeRobot SmolVLA behind our ROS 2 policy node (marker ``lerobot``): ``robot-rl vla-lerobot-export`` writes our
VLA artifact from the tiny SmolVLA of conftest.py, :class:`VLARuntime` (onnxruntime, no torch) gives LeRobot's own
``predict_action_chunk`` + post-processor chunk for the same noise, and ``robot-rl deploy sim2sim`` runs the artifact
behind the policy node over real DDS. Runs in the venv of ``bash .ci/setup_lerobot`` (docs/vla.md).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot", reason="needs LeRobot 0.6.1 (bash .ci/setup_lerobot, then run in that venv)")

from tiny_smolvla import CHUNK, frames

import sim
from robot_rl.deploy.actions import to_raw, to_targets
from robot_rl.deploy.artifact import load_meta
from robot_rl.deploy.instruction import encode
from robot_rl.deploy.vla_runtime import VLARuntime
from robot_rl.export_lerobot import (
    ID_SHIFT,
    LeRobotHead,
    export_lerobot_policy,
    lerobot_token_ids,
    make_lerobot_meta,
)
from robot_rl.models.vla.lerobot_policy import LeRobotPolicy

pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_thread")]
ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5
"""rad: ONNX Runtime vs LeRobot's torch pipeline, the same noise (measured 2-4e-7)."""


@pytest.fixture(scope="module")
def exported(made, spec, tmp_path_factory):
    """``(artifact dir, policy)``: the tiny SmolVLA exported for so101 / so101_reach_lang (joint-target actions)."""
    env = sim.make_env("so101_reach_lang", 1)
    robot, texts = env.robot, list(env.instruction_set.table())
    env.close()
    policy = LeRobotPolicy.load(made[1], action_spec=spec)
    meta = make_lerobot_meta(policy, robot.name, robot.joint_names, [j.default for j in robot.joints], spec,
                             robot.control.policy_hz, texts, task="so101_reach_lang")
    return export_lerobot_policy(policy, meta, tmp_path_factory.mktemp("art") / "policy"), policy


def test_artifact_declares_the_policy(exported):
    meta = load_meta(exported[0])
    assert meta.inputs == "vla" and meta.chunk_length == CHUNK and meta.vla.cameras == ["front"]
    assert (meta.vla.height, meta.vla.width, meta.vla.max_text_len, meta.vla.flow_steps) == (64, 64, 16, 4)
    assert meta.chunk_execution.mode == "open_loop" and meta.chunk_execution.execute_len == CHUNK  # n_action_steps
    assert meta.config["lerobot"]["type"] == "smolvla"


def test_onnx_runtime_gives_lerobots_own_chunk_for_the_same_noise(made, spec, exported):
    from lerobot.policies.factory import make_pre_post_processors

    artifact, policy = exported
    runtime = VLARuntime(artifact)
    pre, post = make_pre_post_processors(policy.policy.config, pretrained_path=str(made[1]))
    images, texts, state = frames(made[0], [0, 150, 250, 399])
    noise = torch.randn(4, CHUNK, 6, generator=torch.Generator().manual_seed(3))
    batch = {"observation.images.front": images["front"].float() / 255, "observation.state": state,
             "task": ["touch the green sphere", *texts[1:]]}  # one instruction cut at 16 tokens (18)
    padded = torch.cat([noise, torch.zeros(4, CHUNK, 2)], dim=-1)  # max_action_dim 8
    policy.policy.reset()
    targets = post(policy.policy.predict_action_chunk(pre(batch), noise=padded)).double().numpy()
    expected = to_targets(spec, to_raw(spec, targets))  # the env's clip, as the graph's action map
    for i in range(4):
        got = runtime.infer({"front": images["front"][i].numpy()}, batch["task"][i], state[i].numpy(),
                            noise[i].numpy())
        np.testing.assert_allclose(got, expected[i], atol=TOLERANCE)
    zero = runtime.infer({"front": images["front"][0].numpy()}, texts[0], state[0].numpy())  # noise None: zeros
    chunk = policy.act({"front": images["front"][:1]}, texts[:1], state[:1])[0].double().numpy()
    np.testing.assert_allclose(zero, to_targets(spec, chunk), atol=TOLERANCE)


def test_head_for_env_action_policies_is_the_adapters_call_under_the_action_map(made, spec, exported):
    """``--action policy``: the chunk is taken as the env action and clipped, as ``act`` without a spec does."""
    from tokenizers import Tokenizer

    artifact, policy = exported
    head = LeRobotHead(policy, spec, targets=False).eval()
    images, texts, state = frames(made[0], [10, 300])
    tokenizer = Tokenizer.from_file(str(artifact / "tokenizer.json"))
    encoded = [encode(tokenizer, t, 16) for t in texts]
    noise = torch.randn(2, CHUNK, 6, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = head(images["front"], torch.as_tensor(np.stack([e[0] for e in encoded])),
                   torch.as_tensor(np.stack([e[1] for e in encoded])), state, noise).reshape(2, CHUNK, 6)
    as_env_action = LeRobotPolicy.load(made[1]).act(images, texts, state, noise).double().numpy()
    np.testing.assert_allclose(got.numpy(), to_targets(spec, as_env_action), atol=TOLERANCE)


def test_tokenizer_json_gives_lerobots_ids_moved_by_two(exported):
    artifact, policy = exported
    runtime = VLARuntime(artifact)
    texts = [*runtime.vla.instructions, "reach the purple thing", "reach the red target\n"]
    for text, ids in zip(texts, lerobot_token_ids(policy, texts), strict=True):
        ours, mask, _ = encode(runtime.tokenizer, text, runtime.vla.max_text_len)
        assert ours[mask].tolist() == [i + ID_SHIFT for i in ids[:16]] and not mask[len(ids):].any()
    assert runtime.tokenizer.token_to_id("[PAD]") == 0 and runtime.tokenizer.token_to_id("[UNK]") == 1


def run_cli(*args, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_cli_export_then_sim2sim_behind_the_policy_node_over_dds(made, tmp_path):
    pytest.importorskip("rclpy", reason="sim2sim needs the [ros] extra (rclpy)")
    out = run_cli("vla-lerobot-export", made[1], "--robot", "so101", "--out", tmp_path / "art")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "exported" in out.stdout and (tmp_path / "art" / "manifest.json").is_file()
    domain = str(1 + os.getpid() % 100)
    run = run_cli("deploy", "sim2sim", "--policy", tmp_path / "art", "--episodes", 2, "--episode-s", 2,
                  "--domain-id", domain, "--sim-rt-priority", 0)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "sim2sim so101: 2 episodes" in run.stdout, run.stdout
    assert "[policy_node]: instruction: '" in run.stderr  # the node encoded the sim's instruction


def test_cli_refuses_a_robot_the_task_does_not_use(made, tmp_path):
    out = run_cli("vla-lerobot-export", made[1], "--robot", "g1", "--out", tmp_path / "art", timeout=300)
    assert out.returncode == 2 and "--robot = 'g1': task so101_reach_lang is played by so101" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "art").exists()
