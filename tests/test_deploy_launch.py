"""Launch files (Python/XML/YAML) agree, parameter files are current, the launch resolver works.

No ROS needed: the ROS 2 launch system is not on PyPI, so the XML/YAML files are validated by
structure and the Python ones by compiling and reading their constants.
"""

from __future__ import annotations

import ast
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from robot_rl.deploy.launch_plan import LaunchError, plan_launch
from robot_rl.deploy.ros_params import ros_params, ros_params_yaml
from sim.robots import load_robot

PKG = Path(__file__).resolve().parents[1] / "ros_nodes"
SHARE = {"ros_nodes": PKG}


def yaml_launch(path: Path) -> tuple[dict, list]:
    entries = yaml.safe_load(path.read_text())["launch"]
    args = {e["arg"]["name"]: e["arg"].get("default") for e in entries if "arg" in e}
    nodes = []
    for e in entries:
        if "node" in e:
            n = e["node"]
            params = [p.get("from") or (p["name"], p["value"]) for p in n["param"]]
            nodes.append((n["pkg"], n["exec"], n["name"], n["namespace"], n.get("if"), params))
    return args, nodes


def xml_launch(path: Path) -> tuple[dict, list]:
    root = ET.parse(path).getroot()
    assert root.tag == "launch"
    args = {a.get("name"): a.get("default") for a in root.findall("arg")}
    nodes = []
    for n in root.findall("node"):
        params = [p.get("from") or (p.get("name"), p.get("value")) for p in n.findall("param")]
        nodes.append((n.get("pkg"), n.get("exec"), n.get("name"), n.get("namespace"), n.get("if"), params))
    return args, nodes


@pytest.mark.parametrize("name", ["sim2sim", "deploy"])
def test_python_xml_yaml_launch_files_agree(name):
    y_args, y_nodes = yaml_launch(PKG / "launch" / f"{name}.launch.yaml")
    x_args, x_nodes = xml_launch(PKG / "launch" / f"{name}.launch.xml")
    assert y_args == x_args
    assert set(y_args) == {"robot", "policy", "namespace", "use_sim"}
    assert y_args["use_sim"] == ("true" if name == "sim2sim" else "false")
    assert y_nodes == x_nodes
    source = (PKG / "launch" / f"{name}.launch.py").read_text()
    tree = ast.parse(source)
    compile(tree, f"{name}.launch.py", "exec")
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert {"robot", "policy", "namespace", "use_sim", "ros_nodes", "config", ".yaml"} <= strings
    assert {node[1] for node in y_nodes} | {node[2] for node in y_nodes} <= strings
    assert f'USE_SIM_DEFAULT = "{y_args["use_sim"]}"' in source
    assert "def generate_launch_description" in source


def test_launch_executables_are_console_scripts():
    scripts = dict(re.findall(r'"(\w+) = ros_nodes\.(\w+):main"', (PKG / "setup.py").read_text()))
    _, nodes = yaml_launch(PKG / "launch" / "sim2sim.launch.yaml")
    for _, exe, *_ in nodes:
        assert scripts.get(exe) == exe and (PKG / "ros_nodes" / f"{exe}.py").is_file()


@pytest.mark.robot_assets()  # robot.yaml only: runs without the models
@pytest.mark.parametrize("robot", ["so101", "unitree_g1", "franka_panda"])
def test_packaged_params_are_current(robot):
    assert (PKG / "config" / f"{robot}.yaml").read_text() == ros_params_yaml(load_robot(robot).as_dict())


def test_ros_params_content():
    params = ros_params(load_robot("franka_panda").as_dict(), policy="/p")
    node = params["/**/policy_node"]["ros__parameters"]
    assert node["command_type"] == "trajectory_msgs/msg/JointTrajectory"
    assert node["command_topic"] == "fr3_arm_controller/joint_trajectory"  # relative: namespaces apply
    assert node["joint_names"][0] == "joint1" and len(node["lower"]) == 7 and node["policy"] == "/p"
    assert params["/**/sim_robot"]["ros__parameters"]["physics_dt"] == 0.002


def test_plan_launch_resolves_like_launch_ros():
    nodes = plan_launch(PKG / "launch" / "sim2sim.launch.yaml", {"policy": "/a/p", "namespace": "arm1"}, SHARE)
    assert [n.name for n in nodes] == ["sim_robot", "policy_node"]
    assert nodes[1].ros_args() == ["--ros-args", "-r", "__node:=policy_node", "-r", "__ns:=/arm1",
                                   "--params-file", str(PKG / "config" / "so101.yaml"), "-p", "policy:=/a/p"]
    alone = plan_launch(PKG / "launch" / "deploy.launch.yaml", {"policy": "/a/p", "robot": "unitree_g1"}, SHARE)
    assert [n.name for n in alone] == ["policy_node"]
    assert alone[0].params_files == (str(PKG / "config" / "unitree_g1.yaml"),)
    with pytest.raises(LaunchError, match="'policy' is required"):
        plan_launch(PKG / "launch" / "deploy.launch.yaml", {}, SHARE)
    with pytest.raises(LaunchError, match=r"unknown launch arguments \['robt'\]"):
        plan_launch(PKG / "launch" / "deploy.launch.yaml", {"policy": "p", "robt": "x"}, SHARE)
