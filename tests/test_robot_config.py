"""robot.yaml loading: the shipped robots load and build; bad files fail naming file, key and fix."""

from __future__ import annotations

from pathlib import Path

import mujoco
import pytest
import yaml

from sim.robots import RobotConfigError, build_model, hardware_dir, load_robot

ROBOTS = ["so101", "franka_panda", "unitree_g1"]


@pytest.mark.parametrize("name", ROBOTS)
def test_shipped_robots_load_and_build(name):
    robot = load_robot(name)
    model = build_model(robot)
    assert model.nu == robot.num_joints
    for i, joint in enumerate(robot.joints):
        assert model.actuator(i).name == joint.name
        assert model.actuator_gainprm[i, 0] == pytest.approx(joint.kp)
        assert model.actuator_biasprm[i, 2] == pytest.approx(-joint.kd)
        assert list(model.actuator_forcerange[i]) == pytest.approx([-joint.effort, joint.effort])
    assert model.opt.timestep == pytest.approx(robot.control.physics_dt)
    assert robot.control.decimation * robot.control.physics_dt == pytest.approx(1 / robot.control.policy_hz)


def test_g1_torque_motors_become_pd_servos():
    model = build_model(load_robot("unitree_g1"))
    assert all(model.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE)
    assert model.site("left_hand").id >= 0


def _write(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((hardware_dir() / "so101" / "robot.yaml").read_text())
    edit(raw)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("edit", "key", "words"),
    [
        (lambda r: r.update(colour="red"), "colour", "unknown key"),
        (lambda r: r["joints"][1].update(stiffness=3), "joints[1].stiffness", "unknown key"),
        (lambda r: r["joints"][2].pop("kp"), "joints[2].kp", "missing"),
        (lambda r: r["joints"][0].update(lower=2.0, upper=1.0), "joints[0].lower", "not below upper"),
        (lambda r: r["joints"][3].update(default=9.0), "joints[3].default", "outside"),
        (lambda r: r["joints"][0].update(name="shoulder_pann"), "joints[0].name", "not in the model"),
        (lambda r: r.pop("joints"), "joints", "missing"),
        (lambda r: r.update(kind="tripod"), "kind", "unknown kind"),
        (lambda r: r["control"].update(physics_dt=0.003), "control.policy_hz", "whole number"),
        (lambda r: r["control"].update(action_type="velocity"), "control.action_type", "unknown action type"),
        (lambda r: r["model"].update(sources=[{"assets": "nowhere/robot.xml"}]), "model.sources", "no model found"),
        (lambda r: r["joints"].append(dict(r["joints"][0])), "joints", "listed twice"),
        (lambda r: r["joints"][0].update(kp="stiff"), "joints[0].kp", "expected a number"),
    ],
)
def test_bad_robot_yaml_names_file_key_and_fix(tmp_path, edit, key, words):
    path = _write(tmp_path, edit)
    with pytest.raises(RobotConfigError) as err:
        build_model(load_robot(path))
    message = str(err.value)
    assert str(path) in message
    assert f"key '{key}'" in message
    assert words in message
    assert "Fix:" in message


def test_unknown_robot_lists_known_ones():
    with pytest.raises(RobotConfigError, match="so101"):
        load_robot("so100")


def test_assets_source_needs_robot_rl_assets(monkeypatch):
    monkeypatch.delenv("ROBOT_RL_ASSETS", raising=False)
    with pytest.raises(RobotConfigError, match="ROBOT_RL_ASSETS"):
        build_model(load_robot("franka_panda"))


def test_invalid_yaml_syntax(tmp_path):
    path = tmp_path / "robot.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(RobotConfigError, match="not valid YAML"):
        load_robot(path)
