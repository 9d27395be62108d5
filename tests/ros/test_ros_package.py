"""`colcon build` of ros_nodes installs the launch/config files and working console scripts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.deploy.ros_env import ros_environment, ros_nodes_path

pytestmark = pytest.mark.ros


def test_colcon_build_installs_package(tmp_path):
    colcon = shutil.which("colcon") or str(Path(sys.executable).parent / "colcon")
    result = subprocess.run(
        [colcon, "--log-base", str(tmp_path / "log"), "build", "--base-paths", str(ros_nodes_path()),
         "--build-base", str(tmp_path / "build"), "--install-base", str(tmp_path / "install")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    prefix = tmp_path / "install" / "ros_nodes"
    share = prefix / "share" / "ros_nodes"
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "ros_nodes").is_file()
    assert (share / "package.xml").is_file()
    for name in ("sim2sim", "deploy"):
        for ext in ("py", "xml", "yaml"):
            assert (share / "launch" / f"{name}.launch.{ext}").is_file()
    for robot in ("so101", "unitree_g1", "franka_panda"):
        assert (share / "config" / f"{robot}.yaml").is_file()
    # the installed console script runs: without a policy it refuses with a clear message
    script = prefix / "lib" / "ros_nodes" / "policy_node"
    site = next((prefix / "lib").glob("python3*/site-packages"))
    env = ros_environment(0)
    env["PYTHONPATH"] = f"{site}:{Path(__file__).resolve().parents[2]}"
    run = subprocess.run([str(script), "--ros-args", "--params-file", str(share / "config" / "so101.yaml")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "parameter 'policy'" in run.stdout + run.stderr
