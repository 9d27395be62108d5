"""Datasets we write load through LeRobot 0.6.1's own loading path (Hugging Face ``datasets`` + pandas).

LeRobot 0.6.1 needs Python >= 3.12, so it cannot be imported on this stack; these tests call what
its loader calls on the same files: ``datasets.Dataset.from_parquet(data/*/*.parquet,
features=<its feature mapping>)`` for frames, the same without features for ``meta/episodes``,
``pandas.read_parquet`` for ``meta/tasks.parquet`` (task strings as the index), and the checks of
its ``DatasetInfo.from_dict``. The LeRobot-written fixture goes through the same path as a control.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lerobot_fixtures import REACH_TINY

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter

datasets = pytest.importorskip("datasets", reason="install the [dev] extra (datasets) for the HF loading checks")
pd = pytest.importorskip("pandas")

FIXTURE = REACH_TINY
NAMES = ["height", "width", "channels"]
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [4], "names": ["a", "b", "c", "d"]},
    "action": {"dtype": "float64", "shape": [4], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
    "grid": {"dtype": "int16", "shape": [2, 3], "names": None},
    "volume": {"dtype": "float32", "shape": [2, 1, 2], "names": None},
    "language": {"dtype": "string", "shape": [1], "names": None},
    "observation.images.wrist": {"dtype": "image", "shape": [16, 24, 3], "names": NAMES},
    "observation.images.front": {"dtype": "video", "shape": [64, 64, 3], "names": NAMES},
}


def lerobot_hf_features(features: dict) -> datasets.Features:
    """LeRobot 0.6.1's ``get_hf_features_from_features`` mapping, feature type by feature type."""
    out = {}
    for key, ft in features.items():
        shape = tuple(ft["shape"])
        if ft["dtype"] == "video":
            continue
        if ft["dtype"] == "image":
            out[key] = datasets.Image()
        elif shape == (1,):
            out[key] = datasets.Value(dtype=ft["dtype"])
        elif len(shape) == 1:
            out[key] = datasets.Sequence(length=shape[0] if shape[0] > 0 else -1, feature=datasets.Value(ft["dtype"]))
        else:
            array = {2: datasets.Array2D, 3: datasets.Array3D, 4: datasets.Array4D, 5: datasets.Array5D}[len(shape)]
            out[key] = array(shape=shape, dtype=ft["dtype"])
    return datasets.Features(out)


def load_like_lerobot(root: Path) -> tuple[datasets.Dataset, datasets.Dataset, pd.DataFrame, dict]:
    """Frames, episodes, tasks and info the way LeRobot 0.6.1 loads them."""
    info = json.loads((root / "meta/info.json").read_text())
    known = {
        "codebase_version",
        "fps",
        "features",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "chunks_size",
        "data_files_size_in_mb",
        "video_files_size_in_mb",
        "data_path",
        "video_path",
        "robot_type",
        "splits",
    }
    assert set(info) <= known | {"tools"}, f"DatasetInfo.from_dict would drop {set(info) - known}"
    for key in ("fps", "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
        assert info[key] > 0, key  # DatasetInfo.__post_init__ raises otherwise
    paths = [str(p) for p in sorted((root / "data").glob("*/*.parquet"))]
    frames = datasets.Dataset.from_parquet(paths, features=lerobot_hf_features(info["features"]))
    episodes = datasets.Dataset.from_parquet([str(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))])
    tasks = pd.read_parquet(root / "meta/tasks.parquet")
    return frames, episodes, tasks, info


def test_lerobot_fixture_loads_through_the_same_path() -> None:
    if not FIXTURE.is_dir():
        pytest.fail(f"LeRobot fixture not found at {FIXTURE} (tests/fixtures/lerobot_v3, or $ROBOT_RL_FIXTURES)")
    frames, episodes, tasks, info = load_like_lerobot(FIXTURE)
    assert len(frames) == info["total_frames"] == 96 and len(episodes) == 3
    assert tasks.loc["reach the blue target"].task_index == 1


def test_our_dataset_loads_like_lerobots(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    root = tmp_path / "ds"
    written = []
    with LeRobotWriter.create(root, fps=15, features=FEATURES, robot_type="so101") as writer:
        for ep, n in enumerate([5, 3]):
            for t in range(n):
                frame = {
                    "observation.state": rng.normal(size=4).astype(np.float32),
                    "action": rng.normal(size=4),
                    "next.done": t == n - 1,
                    "grid": np.arange(6, dtype=np.int16).reshape(2, 3) * (t + 1),
                    "volume": rng.normal(size=(2, 1, 2)).astype(np.float32),
                    "language": f"say {t}",
                    "observation.images.wrist": rng.integers(0, 256, (16, 24, 3), dtype=np.uint8),
                    "observation.images.front": np.full((64, 64, 3), 40 * t, np.uint8),
                }
                writer.add_frame(frame, task=f"task {ep}")
                written.append(frame)
            writer.save_episode()
    frames, episodes, tasks, _info = load_like_lerobot(root)
    assert len(frames) == 8 and frames["index"] == list(range(8)) and frames["episode_index"] == [0] * 5 + [1] * 3
    for i in (0, 4, 7):
        row = frames[i]
        np.testing.assert_array_equal(np.asarray(row["observation.state"], np.float32), written[i]["observation.state"])
        np.testing.assert_array_equal(np.asarray(row["action"]), written[i]["action"])
        np.testing.assert_array_equal(np.asarray(row["grid"]), written[i]["grid"])
        np.testing.assert_array_equal(np.asarray(row["volume"], np.float32), written[i]["volume"])
        np.testing.assert_array_equal(
            np.asarray(row["observation.images.wrist"]), written[i]["observation.images.wrist"]
        )
        assert row["language"] == written[i]["language"] and row["next.done"] == written[i]["next.done"]
    assert episodes["length"] == [5, 3] and episodes["tasks"] == [["task 0"], ["task 1"]]
    assert episodes["videos/observation.images.front/from_timestamp"] == [0.0, 5 / 15]
    assert tasks.loc["task 1"].task_index == 1 and list(tasks.index) == ["task 0", "task 1"]
    assert LeRobotDataset(root).num_frames == 8  # and our own reader agrees
