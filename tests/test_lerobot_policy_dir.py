"""What the LeRobot policy path checks without LeRobot installed (the real layer is tests/lerobot_env, marker
``lerobot``): the policy directory's files and config.json (robot_rl.models.vla.lerobot_policy.check_policy_dir), the
robot's joint-target map of ``robot-rl vla-lerobot-eval --action joint``, and both LeRobot commands (eval, export)
refusing a bad directory."""

import importlib.util
import json

import numpy as np
import pytest
import torch

import sim
from robot_rl.cli import main as cli_main
from robot_rl.deploy.actions import robot_action_spec, to_raw
from robot_rl.errors import InputError
from robot_rl.models.vla.lerobot_policy import check_policy_dir

FEATURES = {"input_features": {"observation.images.front": {"type": "VISUAL", "shape": [3, 64, 64]},
                               "observation.state": {"type": "STATE", "shape": [6]}},
            "output_features": {"action": {"type": "ACTION", "shape": [6]}}}


@pytest.fixture
def policy_dir(tmp_path):
    """The files of a saved SmolVLA (contents stand-ins: only the names and the JSON are read here)."""
    (tmp_path / "config.json").write_text(json.dumps({"type": "smolvla", **FEATURES}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    for name, state in (("policy_preprocessor", "policy_preprocessor_step_5_normalizer_processor.safetensors"),
                        ("policy_postprocessor", "policy_postprocessor_step_0_unnormalizer_processor.safetensors")):
        steps = [{"registry_name": "device_processor", "config": {}}, {"registry_name": "x", "state_file": state}]
        (tmp_path / f"{name}.json").write_text(json.dumps({"name": name, "steps": steps}))
        (tmp_path / state).write_bytes(b"")
    return tmp_path


def test_complete_directory_passes(policy_dir):
    assert check_policy_dir(policy_dir)["type"] == "smolvla"


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "policy_preprocessor.json",
                                  "policy_postprocessor.json",
                                  "policy_postprocessor_step_0_unnormalizer_processor.safetensors"])
def test_each_missing_file_is_named(policy_dir, name):
    (policy_dir / name).unlink()
    with pytest.raises(InputError, match=rf"{name}: file (missing|named by policy_postprocessor.json is missing).*"
                                         r"Fix: point at the directory LeRobot's save_pretrained wrote"):
        check_policy_dir(policy_dir)


def test_not_a_directory(tmp_path):
    with pytest.raises(InputError, match="is not a directory"):
        check_policy_dir(tmp_path / "nowhere")


@pytest.mark.parametrize(("config", "match"), [
    ("{not json", "cannot be read as JSON"),
    (json.dumps({"type": "act", **FEATURES}),
     r"type = 'act': policy type not supported here \(supported: \['smolvla'\]"),
    (json.dumps({"type": "smolvla", "input_features": {"observation.state": {}}, "output_features": {"action": {}}}),
     r"input_features = \['observation.state'\]: needs a camera input"),
    (json.dumps({"type": "smolvla", "input_features": FEATURES["input_features"], "output_features": {}}),
     r"output_features = \[\]: has no 'action' output"),
])
def test_bad_config_is_refused(policy_dir, config, match):
    (policy_dir / "config.json").write_text(config)
    with pytest.raises(InputError, match=match):
        check_policy_dir(policy_dir)


@pytest.mark.parametrize("command", [["vla-lerobot-eval"], ["vla-lerobot-export", "--out", "unused"]])
def test_commands_refuse_a_bad_directory_with_exit_2(policy_dir, capsys, command):
    (policy_dir / "model.safetensors").unlink()
    assert cli_main([*command, str(policy_dir)]) == 2
    assert "model.safetensors: file missing from the LeRobot policy directory" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("lerobot") is not None, reason="lerobot is installed here")
@pytest.mark.parametrize("command", [["vla-lerobot-eval"], ["vla-lerobot-export", "--out", "unused"]])
def test_commands_without_lerobot_name_the_setup_script(policy_dir, capsys, command):
    assert cli_main([*command, str(policy_dir)]) == 2
    err = capsys.readouterr().err
    assert "needs lerobot 0.6.1" in err and "bash .ci/setup_lerobot" in err


def test_robot_action_spec_is_the_envs_own_joint_target_map():
    env = sim.make_env("so101_reach_lang", 2, seed=0)
    spec = robot_action_spec(env.robot)
    action = torch.tensor([[0.5, -0.25, 0.0, 1.0, -1.0, 0.1], [0.0, 0.3, -0.6, 0.2, 0.9, -0.4]])
    targets = env.actuator_command(action)
    inside = ((targets > env.joint_lower) & (targets < env.joint_upper)).all(dim=1)
    assert inside.any()
    np.testing.assert_allclose(to_raw(spec, targets.double().numpy())[inside.numpy()], action[inside].numpy(),
                               atol=1e-6)
    np.testing.assert_allclose(to_raw(spec, targets.double().numpy()), env.action_for_targets(targets).numpy(),
                               atol=1e-6)
    env.close()
