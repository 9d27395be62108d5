"""rosbag2 -> LeRobot dataset without DDS: bags written with rosbags' writer (both storage plugins)
from messages whose values and times are known, so every frame can be checked exactly; and the
clear errors for missing, truncated and corrupt bags.

The conversion of a bag recorded from the simulated robot node over real DDS is in
tests/ros/test_ros_rosbag.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from robot_rl.commands import dataset as dataset_cmd
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.rosbag import BagError, bag_to_dataset
from sim.robots import load_robot

ROBOT = load_robot("so101").as_dict()
JOINTS = [j["name"] for j in ROBOT["joints"]]
TS = get_typestore(Stores.ROS2_KILTED)
T = TS.types


def joint_state(names: list[str], pos: np.ndarray, vel: bool = True):
    stamp = T["builtin_interfaces/msg/Time"](sec=0, nanosec=0)
    return T["sensor_msgs/msg/JointState"](
        header=T["std_msgs/msg/Header"](stamp=stamp, frame_id=""), name=names, position=pos,
        velocity=np.zeros(len(names)) if vel else np.zeros(0), effort=np.zeros(0))


def command(values: np.ndarray):
    layout = T["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
    return T["std_msgs/msg/Float64MultiArray"](layout=layout, data=values)


def write_bag(path: Path, storage: StoragePlugin, bursts: list[tuple[float, float]]) -> dict[str, list]:
    """~100 Hz JointState (joint order reversed, joint j = time + 0.1 j) and ~50 Hz commands
    (value = time + 10) during each ``(start, end)`` burst, times jittered by up to 2 ms; returns
    ``{"state": [(t, [6])], "command": [(t, [6])]}`` as written (robot joint order)."""
    rng = np.random.default_rng(0)
    written: dict[str, list] = {"state": [], "command": []}
    with Writer(path, version=9, storage_plugin=storage) as w:
        js = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=TS)
        cmd = w.add_connection("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray",
                               typestore=TS)
        for start, end in bursts:
            for i in range(round((end - start) * 100)):
                ns = round((start + i / 100 + rng.uniform(0, 0.002)) * 1e9)
                pos = ns * 1e-9 + 0.1 * np.arange(6)
                w.write(js, ns, TS.serialize_cdr(joint_state(JOINTS[::-1], pos[::-1].copy()), js.msgtype))
                written["state"].append((ns * 1e-9, pos))
                if i % 2 == 1:
                    ns = round((start + i / 100 + rng.uniform(0.003, 0.005)) * 1e9)
                    values = np.full(6, ns * 1e-9 + 10.0)
                    w.write(cmd, ns, TS.serialize_cdr(command(values), cmd.msgtype))
                    written["command"].append((ns * 1e-9, values))
    return written


def latest(stream: list, t: float) -> np.ndarray:
    """The oracle: the last message at or before ``t`` by a linear scan."""
    return [v for tm, v in stream if tm <= t][-1]


@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3])
def test_bag_frames_are_exact(tmp_path, storage):
    bag = tmp_path / "bag"
    written = write_bag(bag, storage, [(1.0, 2.0), (3.0, 3.5)])
    summary = bag_to_dataset([bag], ROBOT, tmp_path / "ds", fps=20, task="synthetic", gap_s=0.3)
    assert summary.episodes == 2 and summary.skipped_messages == 0
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.fps == 20 and ds.features["observation.state"].names == [f"{j}.pos" for j in JOINTS]
    assert ds.episode_task(0) == "synthetic"
    for ep, (lo, hi) in enumerate([(1.0, 2.0), (3.0, 3.5)]):
        states = [m for m in written["state"] if lo <= m[0] < hi]
        commands = [m for m in written["command"] if lo <= m[0] < hi]
        start = max(states[0][0], commands[0][0])
        end = min(states[-1][0], commands[-1][0])
        e = ds.episode(ep)
        n = len(e["action"])
        assert n == int((end - start) * 20) + 1
        for k in range(n):
            t = start + k / 20
            np.testing.assert_allclose(e["observation.state"][k], latest(states, t), rtol=0, atol=1e-6)
            np.testing.assert_allclose(e["action"][k], latest(commands, t + 1 / 20), rtol=0, atol=4e-6)
        assert np.all(e["observation.velocity"] == 0.0)
    # one episode per bag ignores the gap
    assert bag_to_dataset([bag], ROBOT, tmp_path / "one", fps=20, split="bag").episodes == 1


def test_from_bag_command_and_clear_errors(tmp_path, capsys):
    bag = tmp_path / "bag"
    write_bag(bag, StoragePlugin.MCAP, [(1.0, 1.5)])
    out = tmp_path / "ds"
    assert dataset_cmd.main(["from-bag", str(bag), "--robot", "so101", "--fps", "30", "--out", str(out)]) == 0
    assert "wrote 1 episodes" in capsys.readouterr().out
    assert LeRobotDataset(out).num_episodes == 1

    def fails(path: Path, match: str, **kw) -> None:
        with pytest.raises(BagError, match=match):
            bag_to_dataset([path], ROBOT, tmp_path / "never", fps=30, **kw)
        assert not (tmp_path / "never").exists()

    fails(tmp_path / "nothing", "does not exist")
    fails(bag, "no command topic", command_topic="/other")
    mcap = next(bag.glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])  # a recorder killed mid-write
    fails(bag, "truncated or corrupt")
    sqlite = tmp_path / "sqlite"
    write_bag(sqlite, StoragePlugin.SQLITE3, [(1.0, 1.5)])
    db = next(sqlite.glob("*.db3"))
    db.write_bytes(b"garbage" * 100)
    fails(sqlite, "truncated or corrupt")
    assert dataset_cmd.main(["from-bag", str(sqlite), "--robot", "so101", "--out", str(tmp_path / "x")]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
