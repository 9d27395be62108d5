"""Issue 14 items 3-5 without ROS: SafetyConfig validation, commands always inside the joint limits
(hand values and a property test), the artifact validator and its manifest, export of a diverged actor,
ROS domain ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from robot_rl.cli import main as cli
from robot_rl.deploy.artifact import ArtifactError, load_meta
from robot_rl.deploy.ros_env import check_domain_id
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.deploy.safety import SafetyConfig, SafetyState, latch_estop, safety_step, set_enabled
from robot_rl.deploy.validate import RobotSpec, check_control_hz
from robot_rl.errors import InputError
from robot_rl.export import PolicyHead, export_policy, make_meta
from sim.robots import load_robot

ROBOT = load_robot("so101")
LAYOUT = [("joint_pos", 6, 1.0), ("joint_vel", 6, 0.1), ("last_action", 6, 1.0)]


def cfg(**kw) -> SafetyConfig:
    base = dict(lower=np.array([-1.0, -2.0]), upper=np.array([1.0, 2.0]), max_step_change=np.array([0.1, 0.2]),
                stale_state_timeout=0.2, soft_start_s=0.0, source="params.yaml")
    return SafetyConfig(**{**base, **kw})


def export(tmp_path, net=None, name="policy"):
    meta = make_meta("so101", ROBOT.joint_names, [j.default for j in ROBOT.joints], LAYOUT, 0.5,
                     ROBOT.control.policy_hz, task="so101_reach")
    torch.manual_seed(0)
    return export_policy(PolicyHead(net or torch.nn.Linear(18, 6), meta), meta, tmp_path / name, formats=("onnx",))


@pytest.mark.parametrize("kw, key", [
    (dict(stale_state_timeout=float("nan")), "stale_state_timeout"),
    (dict(stale_state_timeout=0.0), "stale_state_timeout"),
    (dict(stale_state_timeout=1e9), "stale_state_timeout"),
    (dict(soft_start_s=float("nan")), "soft_start_s"),
    (dict(soft_start_s=-1.0), "soft_start_s"),
    (dict(upper=np.array([1.0, np.inf])), "upper"),
    (dict(lower=np.array([np.nan, -2.0])), "lower"),
    (dict(max_step_change=np.array([0.1, np.nan])), "max_step_change"),
    (dict(max_step_change=["fast", "fast"]), "max_step_change"),
    (dict(max_step_change=np.array([0.1, 0.0])), "max_step_change"),
    (dict(max_step_change=np.array([0.1])), "max_step_change"),
    (dict(lower=np.array([1.0, -2.0])), "lower"),
    (dict(estop_mode="freeze"), "estop_mode"),
])
def test_safety_config_refuses_non_finite_and_out_of_range_values(kw, key):
    with pytest.raises(InputError) as info:
        cfg(**kw)
    assert info.value.key == key and str(info.value).startswith(f"params.yaml: {key}")


def test_safety_config_from_robot_yaml_names_the_file():
    robot = ROBOT.as_dict()
    robot["safety"] = dict(robot["safety"], stale_state_timeout=float("nan"))
    with pytest.raises(InputError, match=r"so101/robot.yaml: stale_state_timeout = nan: must be a finite number"):
        SafetyConfig.from_robot(robot)


def test_command_from_a_pose_outside_the_limits_stays_inside_by_hand():
    # limits [-1, 1] x [-2, 2]; measured [-1.5, 2.5] (outside); step [0.1, 0.2]
    c = cfg()
    out = safety_step(c, SafetyState(), np.array([-0.5, 1.0]), np.array([-1.5, 2.5]), 0.0, 0.0)
    # the rate limit starts from the measured pose clamped to [-1, 2], not from [-1.5, 2.5] (-1.4, 2.3 before)
    np.testing.assert_allclose(out.command, [-0.9, 1.8])
    # a target pointing further out: the clamped pose itself, never the measured one
    out = safety_step(c, SafetyState(), np.array([-5.0, 5.0]), np.array([-1.5, 2.5]), 0.0, 0.0)
    np.testing.assert_allclose(out.command, [-1.0, 2.0])
    # soft start from outside: blends from the clamped pose
    c = cfg(soft_start_s=1.0, max_step_change=np.array([5.0, 5.0]))
    out = safety_step(c, SafetyState(), np.array([0.0, 0.0]), np.array([-3.0, 3.0]), 0.0, 0.0)
    np.testing.assert_allclose(out.command, [-1.0, 2.0])
    out = safety_step(c, out.state, np.array([0.0, 0.0]), np.array([-3.0, 3.0]), 0.5, 0.5)
    np.testing.assert_allclose(out.command, [-0.5, 1.0])
    # e-stop in damp mode follows the measured pose, clamped
    out = safety_step(cfg(estop_mode="damp"), latch_estop(SafetyState(), None), None, np.array([-1.5, 2.5]), 0.0, 0.0)
    np.testing.assert_allclose(out.command, [-1.0, 2.0])


def test_nothing_is_sent_before_the_first_policy_target():
    c = cfg()
    for target, event in ((None, "no_policy"), (np.array([np.nan, 0.0]), "nan")):
        out = safety_step(c, SafetyState(), target, np.zeros(2), 0.0, 0.0)
        assert out.command is None and out.events == (event,) and out.state.ramp_start is None
    out = safety_step(c, SafetyState(), np.array([0.0, 0.0]), np.array([np.nan, 0.0]), 0.0, 0.0)
    assert out.command is None and out.events == ("no_state",)


def test_property_every_command_inside_the_limits_and_none_new_after_the_stale_timeout():
    rng = np.random.default_rng(0)
    for trial in range(200):
        A = int(rng.integers(1, 5))
        lower = rng.uniform(-3, 0, A) - 0.01
        upper = lower + rng.uniform(0.02, 4, A)
        c = SafetyConfig(lower=lower, upper=upper, max_step_change=rng.uniform(0.01, 3, A),
                         stale_state_timeout=float(rng.uniform(0.05, 0.5)), soft_start_s=float(rng.uniform(0, 1)),
                         estop_mode=str(rng.choice(["hold", "damp"])))
        state, now, state_time = SafetyState(), 0.0, None
        for _ in range(60):
            now += float(rng.uniform(0.005, 0.1))
            if rng.random() < 0.8:  # a JointState arrived, anywhere (up to 3 rad outside the limits)
                state_time = now
                measured = rng.uniform(lower - 3, upper + 3)
            event = rng.random()
            if event < 0.03:
                state = latch_estop(state, measured)
            elif event < 0.06:
                state = set_enabled(state, bool(rng.random() < 0.7))
            target = rng.uniform(lower - 5, upper + 5) if rng.random() < 0.9 else np.full(A, np.nan)
            before = state.last_command
            out = safety_step(c, state, target, measured if state_time is not None else None, now, state_time)
            state = out.state
            if out.command is None:
                continue
            assert np.all(out.command >= lower) and np.all(out.command <= upper), (trial, out.command, lower, upper)
            stale = state_time is None or now - state_time > c.stale_state_timeout
            if stale and out.events != ("estop",):  # the e-stop outranks the watchdog (it holds or damps)
                assert out.events == ("stale",) and out.command is before, "a new command after the stale timeout"


def test_export_writes_a_manifest_covering_policy_yaml_and_every_loader_verifies_it(tmp_path):
    art = export(tmp_path)
    manifest = json.loads((art / "manifest.json").read_text())
    assert set(manifest["files"]) == {"policy.yaml", "policy.onnx"}
    assert load_meta(art).control_hz == ROBOT.control.policy_hz
    text = (art / "policy.yaml").read_text()
    (art / "policy.yaml").write_text(text.replace("control_hz: 25.0", "control_hz: 1000.0"))
    with pytest.raises(ArtifactError, match=r"policy/policy.yaml: does not match its sha256 in manifest.json"):
        PolicyRuntime(art)
    (art / "policy.yaml").write_text(text)
    PolicyRuntime(art)
    (art / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match=r"manifest.json: missing.*Fix: re-export"):
        PolicyRuntime(art)


def test_export_refuses_a_diverged_actor_and_writes_nothing(tmp_path):
    net = torch.nn.Linear(18, 6)
    with torch.no_grad():
        net.weight[2, 3] = float("nan")
    with pytest.raises(ArtifactError, match=r"run: net.weight: the actor has 1 non-finite .*training diverged"):
        export(tmp_path / "run", net)
    assert not (tmp_path / "run" / "policy" / "manifest.json").exists()
    assert not (tmp_path / "run" / "policy" / "policy.yaml").exists()


def test_runtime_refuses_default_pose_that_differs_from_or_leaves_the_robot(tmp_path):
    art = export(tmp_path)
    spec = RobotSpec.from_robot(ROBOT.as_dict())
    PolicyRuntime(art, robot=spec)
    moved = RobotSpec("params", spec.joint_names, spec.lower, spec.upper, spec.default + np.eye(6)[3] * 0.05)
    with pytest.raises(ArtifactError, match=r"default_joint_pos\[3\] = 0.6: joint 'wrist_flex' differs from default"):
        PolicyRuntime(art, robot=moved)
    narrow = RobotSpec("params", spec.joint_names, spec.lower, np.where(np.arange(6) == 2, 0.5, spec.upper),
                       np.minimum(spec.default, 0.5))
    with pytest.raises(ArtifactError, match=r"default_joint_pos\[2\] = 1.0: joint 'elbow_flex' at 1 is outside"):
        PolicyRuntime(art, robot=narrow)
    with pytest.raises(ArtifactError, match="params: default = "):
        RobotSpec("params", spec.joint_names, spec.lower, spec.upper, np.full(6, np.nan))


def test_policy_yaml_numbers_are_checked_behind_the_checksums():
    meta = make_meta("so101", ROBOT.joint_names, [j.default for j in ROBOT.joints], LAYOUT, 0.5, 25.0)
    data = yaml.safe_load(yaml.safe_dump(meta.to_dict()))
    from robot_rl.deploy.artifact import PolicyMeta

    for key, value, message in (("control_hz", float("nan"), "control_hz = nan: must be a finite number"),
                                ("control_hz", 1e6, r"control_hz = 1000000.0: must be in \(0, 1000\] Hz"),
                                ("chunk_length", True, "chunk_length = True: must be a whole number")):
        with pytest.raises(ArtifactError, match=message):
            PolicyMeta.from_dict({**data, key: value})
    with pytest.raises(ArtifactError, match=r"action.scale\[0\] = nan"):
        PolicyMeta.from_dict({**data, "action": {**data["action"], "scale": [float("nan")] * 6}})


def test_control_hz_override_and_domain_ids():
    assert check_control_hz(0.0, "p") == 0.0 and check_control_hz(50.0, "p") == 50.0
    for bad in (float("nan"), 1e6, -1.0):
        with pytest.raises(ArtifactError, match="p: control_hz"):
            check_control_hz(bad, "p")
    assert check_domain_id(0) == 0 and check_domain_id(101) == 101 and check_domain_id(215) == 215
    for bad in (-1, 102, 123, 214, 233):
        with pytest.raises(InputError, match="ROS_DOMAIN_ID"):
            check_domain_id(bad)


def test_sim2sim_refuses_domain_id_123_with_exit_2(tmp_path, capsys):
    art = export(tmp_path)
    with pytest.raises(SystemExit) as exited:  # argparse refuses the flag (domain_id type) and exits
        cli(["deploy", "sim2sim", "--policy", str(art), "--domain-id", "123", "--episodes", "1"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --domain-id" in err and "123" in err and "0..101" in err and "Traceback" not in err


def test_the_validator_does_not_import_torch():
    """The policy node's validator is numpy + onnxruntime + PyYAML only: a robot computer has no torch."""
    import subprocess
    import sys

    code = ("import sys; import robot_rl.deploy.validate, robot_rl.deploy.runtime, robot_rl.deploy.safety; "
            "print(sorted(m for m in ('torch', 'sim') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
