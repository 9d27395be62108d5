"""VLA export and the torch-free VLA runtime: torch vs ONNX Runtime, the artifact's validation, bad runtime input.

A small untrained :class:`VLAPolicy` (2 cameras, 32x32 images, chunk 4, 3 Euler steps) is enough: export must
reproduce whatever the torch policy computes, trained or not.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch
import yaml
from vla_small import ACTION, DEFAULT, INSTRUCTIONS, JOINTS, SIZE, export, small_policy

from robot_rl.deploy.actions import to_targets
from robot_rl.deploy.artifact import ArtifactError, sha256_file, write_manifest
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.deploy.validate import load_policy
from robot_rl.deploy.vla_runtime import VLARuntime, resize_nearest
from robot_rl.errors import InputError
from robot_rl.export_vla import export_vla_policy, make_vla_meta


@pytest.fixture
def exported(small_vla_artifact):
    """``(policy, artifact dir, meta)`` of the session's small VLA export (tests/vla_small.py); read only."""
    return small_vla_artifact


def copy_artifact(src, dst):
    shutil.copytree(src, dst)
    return dst


def edit_yaml(artifact, change) -> None:
    """Edit policy.yaml and re-sign the manifest (so only the edit itself can be refused)."""
    path = artifact / "policy.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    write_manifest(artifact, json.loads((artifact / "manifest.json").read_text())["files"].keys())


def test_onnx_equals_torch_forward_with_the_same_noise_on_two_cameras_and_a_batch(exported):
    """Graph output = offset + scale * clip(VLAPolicy.forward) for 5 rows of random images, instructions, states and
    noise: max abs difference below 1e-5 rad (measured 0.8e-6 to 1.1e-6 rad here, seeds 0-2)."""
    policy, out, meta = exported
    _, session = load_policy(out)
    gen = torch.Generator().manual_seed(1)
    images = tuple(torch.randint(0, 256, (5, 3, SIZE, SIZE), dtype=torch.uint8, generator=gen) for _ in range(2))
    tokens, mask = policy.encode_text([INSTRUCTIONS[i % 3] for i in range(5)])
    state = torch.tensor(DEFAULT) + 0.2 * torch.randn(5, 6, generator=gen)
    noise = torch.randn(5, 4, 6, generator=gen)
    with torch.no_grad():
        chunk = policy(images, tokens, mask, state, noise).numpy()  # [5, 4, 6] in [-1, 1]
    feeds = {"image_front": images[0].numpy(), "image_wrist": images[1].numpy(), "tokens": tokens.numpy(),
             "token_mask": mask.numpy(), "state": state.numpy(), "noise": noise.numpy()}
    got = session.run(["action"], feeds)[0].reshape(5, 4, 6)
    expected = to_targets(meta.action, chunk)
    assert np.abs(got - expected).max() < 1e-5
    assert np.abs(chunk).max() > 0.05  # not a trivially constant policy

    # the runtime, one robot at a time from raw strings and [3, H, W] images, gives the same rows
    runtime = VLARuntime(out)
    for row in range(2):
        targets = runtime.infer({"front": feeds["image_front"][row], "wrist": feeds["image_wrist"][row]},
                                INSTRUCTIONS[row % 3], state[row].numpy(), noise[row].numpy())
        assert np.abs(targets - expected[row]).max() < 1e-5
    zero = runtime.infer({"front": feeds["image_front"][0], "wrist": feeds["image_wrist"][0]}, INSTRUCTIONS[0],
                         state[0].numpy())
    with torch.no_grad():
        torch_zero = policy.act({"front": images[0][:1], "wrist": images[1][:1]}, [INSTRUCTIONS[0]], state[:1])
    assert np.abs(zero - to_targets(meta.action, torch_zero[0].numpy())).max() < 1e-5  # noise defaults to zeros


def test_the_artifact_states_its_inputs_and_checksums_the_tokenizer(exported):
    _, out, _ = exported
    data = yaml.safe_load((out / "policy.yaml").read_text())
    assert data["inputs"] == "vla" and data["observation"] == []
    assert data["vla"]["cameras"] == ["front", "wrist"] and data["vla"]["height"] == SIZE
    assert data["vla"]["instructions"] == INSTRUCTIONS and data["vla"]["flow_steps"] == 3
    assert data["chunk_length"] == 4 and data["vla"]["resize"] == "none"
    manifest = json.loads((out / "manifest.json").read_text())["files"]
    assert set(manifest) == {"policy.yaml", "policy.onnx", "tokenizer.json"}
    assert not (out / "policy.pt").exists()
    with pytest.raises(ArtifactError, match="VLA policy"):
        PolicyRuntime(out)


@pytest.mark.parametrize("case", ["tokenizer_missing", "tokenizer_tampered", "tokenizer_unlisted",
                                  "height_edited", "garbage_tokenizer", "camera_renamed", "bad_resize"])
def test_a_broken_vla_artifact_is_refused_naming_the_file_or_key(exported, tmp_path, case):
    _, out, _ = exported
    art = copy_artifact(out, tmp_path / "policy")
    expect = {"tokenizer_missing": "tokenizer.json", "tokenizer_tampered": "tokenizer.json",
              "tokenizer_unlisted": "lists no tokenizer.json", "height_edited": "image_front",
              "garbage_tokenizer": "not a tokenizers JSON", "camera_renamed": "image_left",
              "bad_resize": "vla.resize"}[case]
    if case == "tokenizer_missing":
        (art / "tokenizer.json").unlink()
    elif case == "tokenizer_tampered":
        (art / "tokenizer.json").write_text((art / "tokenizer.json").read_text().replace("red", "rot"))
    elif case == "tokenizer_unlisted":
        edit_yaml(art, lambda d: d["files"].pop("tokenizer.json"))
    elif case == "height_edited":
        edit_yaml(art, lambda d: d["vla"].update(height=48))
    elif case == "garbage_tokenizer":
        (art / "tokenizer.json").write_text("{not json")  # re-signed everywhere: only its content is wrong
        edit_yaml(art, lambda d: d["files"].update({"tokenizer.json": sha256_file(art / "tokenizer.json")}))
    elif case == "camera_renamed":
        edit_yaml(art, lambda d: d["vla"].update(cameras=["left", "wrist"]))
    else:
        edit_yaml(art, lambda d: d["vla"].update(resize="bilinear"))
    with pytest.raises(ArtifactError, match=expect):
        VLARuntime(art)


def test_runtime_bad_inputs_are_clear_errors(exported, caplog):
    _, out, _ = exported
    runtime = VLARuntime(out)
    good = {"front": np.zeros((3, SIZE, SIZE), np.uint8), "wrist": np.zeros((3, SIZE, SIZE), np.uint8)}
    state = np.array(DEFAULT)
    assert runtime.infer(good, INSTRUCTIONS[0], state).shape == (4, 6)
    with pytest.raises(InputError, match=r"no image from camera\(s\) \['wrist'\]"):
        runtime.infer({"front": good["front"]}, INSTRUCTIONS[0], state)
    with pytest.raises(InputError, match="image is 48x48, the policy takes 32x32"):
        runtime.infer({**good, "wrist": np.zeros((3, 48, 48), np.uint8)}, INSTRUCTIONS[0], state)
    with pytest.raises(InputError, match="must be uint8"):
        runtime.infer({**good, "wrist": np.zeros((3, SIZE, SIZE), np.float32)}, INSTRUCTIONS[0], state)
    with pytest.raises(InputError, match="instruction is empty"):
        runtime.infer(good, "  ", state)
    with pytest.raises(InputError, match=r"\[UNK\]"):
        runtime.infer(good, "reach the rød target", state)
    with pytest.raises(InputError, match="5000 characters, more than 4096") as refused:
        runtime.infer(good, "reach " * 833 + "go", state)
    assert len(str(refused.value)) < 300  # the text is quoted cut to 80 characters, not all 5000
    assert runtime.instruction == INSTRUCTIONS[0]  # the refused ones never replaced it
    with pytest.raises(InputError, match="state must be"):
        runtime.infer(good, INSTRUCTIONS[0], np.array([0.0, np.nan, 1.0, 0.6, 0.0, 0.0]))
    with pytest.raises(InputError, match="state must be"):
        runtime.infer(good, INSTRUCTIONS[0], state[:5])
    with caplog.at_level(logging.WARNING, logger="robot_rl.deploy.vla_runtime"):
        assert np.isfinite(runtime.infer(good, "reach the purple target", state)).all()
    assert "not one the policy was trained on" in caplog.text
    assert runtime.set_instruction(INSTRUCTIONS[1]) == []
    with pytest.raises(InputError, match="not one the policy was trained on") as untrained:  # the node's default
        runtime.set_instruction("reach the purple target", allow_untrained=False)
    assert "run_untrained_instructions:=true" in str(untrained.value) and runtime.instruction == INSTRUCTIONS[1]
    assert "cut at 8" in runtime.set_instruction("reach the red target and then the blue one and back")[-1]


def test_resize_nearest_by_hand_and_only_where_policy_yaml_allows(exported, tmp_path):
    image = np.arange(3 * 2 * 4, dtype=np.uint8).reshape(3, 2, 4)
    up = resize_nearest(image, 4, 2)  # rows (i + 0.5) * 2/4 -> 0, 0, 1, 1; columns (j + 0.5) * 4/2 -> 1, 3
    assert up.shape == (3, 4, 2)
    assert up[0].tolist() == [[1, 3], [1, 3], [5, 7], [5, 7]]
    _, out, _ = exported
    art = copy_artifact(out, tmp_path / "policy")
    edit_yaml(art, lambda d: d["vla"].update(resize="nearest"))
    runtime = VLARuntime(art)
    big = {"front": np.full((3, 64, 64), 7, np.uint8), "wrist": np.full((3, 16, 16), 7, np.uint8)}
    small = {"front": np.full((3, SIZE, SIZE), 7, np.uint8), "wrist": np.full((3, SIZE, SIZE), 7, np.uint8)}
    np.testing.assert_array_equal(runtime.infer(big, INSTRUCTIONS[0], np.array(DEFAULT)),
                                  runtime.infer(small, INSTRUCTIONS[0], np.array(DEFAULT)))


def test_export_refuses_non_finite_weights_and_a_meta_of_another_policy(tmp_path):
    policy = small_policy()
    one_camera = small_policy(cameras=("front",))
    meta = make_vla_meta(one_camera, "so101", JOINTS, DEFAULT, ACTION, 25.0, (SIZE, SIZE))
    with pytest.raises(ArtifactError, match="does not describe the policy"):
        export_vla_policy(policy, meta, tmp_path / "a")
    with torch.no_grad():
        next(policy.parameters())[0] = float("nan")
    with pytest.raises(ArtifactError, match="non-finite"):
        export(policy, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_deploy_check_reports_a_vla_artifact(exported):
    from robot_rl.deploy.checks import check_artifact
    from sim.robots import load_robot

    _, out, _ = exported
    report = check_artifact(out, load_robot("so101").as_dict(), runs=3)
    assert report.errors == 0, report.lines
    assert "VLA policy" in report.lines[0] and "['front', 'wrist'] 32x32 rgb8" in report.lines[0]
    assert any("inference p50" in line for line in report.lines)


@pytest.mark.parametrize(("global_condition", "action_expert"),
                         [pytest.param(False, "transformer", marks=pytest.mark.slow),
                          pytest.param(True, "transformer", marks=pytest.mark.slow), (True, "mlp")])
def test_the_instructed_efficientnet_encoder_exports_with_its_frozen_layers(tmp_path, global_condition,
                                                                          action_expert):
    """``efficientnet_lite0_film``: the frozen EfficientNet-Lite0 blocks and the FiLM head are in the graph (and the
    global-conditioning MLP where the config has it, and either action expert); ONNX Runtime equals torch with the
    same noise, and another instruction gives another chunk."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    policy = small_policy(image_encoder="efficientnet_lite0_film", global_condition=global_condition,
                          action_expert=action_expert)
    out, meta = export(policy, tmp_path / "film")
    runtime = VLARuntime(out)
    gen = torch.Generator().manual_seed(3)
    images = {cam: torch.randint(0, 256, (1, 3, SIZE, SIZE), dtype=torch.uint8, generator=gen)
              for cam in ("front", "wrist")}
    state, noise = torch.tensor([DEFAULT]), torch.randn(1, 4, 6, generator=gen)
    raw = {cam: im[0].numpy() for cam, im in images.items()}
    chunks = []
    for text in INSTRUCTIONS[:2]:
        with torch.no_grad():
            tokens, mask = policy.encode_text([text])
            chunk = policy((images["front"], images["wrist"]), tokens, mask, state, noise).numpy()
        got = runtime.infer(raw, text, state[0].numpy(), noise[0].numpy())
        assert np.abs(got - to_targets(meta.action, chunk)[0]).max() < 1e-5
        chunks.append(got)
    assert np.abs(chunks[0] - chunks[1]).max() > 1e-4
