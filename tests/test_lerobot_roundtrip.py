"""Write -> read round trips of every feature type, file roll-over, and layout parity with LeRobot's files."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import REACH_TINY

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter
from robot_rl.data.lerobot import writer as writer_module
from robot_rl.data.lerobot.stats import feature_stats

FIXTURE = REACH_TINY
NAMES = ["height", "width", "channels"]
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [6], "names": [f"j{i}.pos" for i in range(6)]},
    "action": {"dtype": "float64", "shape": [6], "names": None},
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
    "counter": {"dtype": "int32", "shape": [1], "names": None},
    "mask": {"dtype": "uint8", "shape": [3], "names": None},
    "grid": {"dtype": "int16", "shape": [2, 3], "names": None},
    "volume": {"dtype": "float32", "shape": [2, 2, 2], "names": None},
    "empty": {"dtype": "float32", "shape": [0], "names": None},
    "language": {"dtype": "string", "shape": [1], "names": None},
    "observation.images.wrist": {"dtype": "image", "shape": [24, 32, 3], "names": NAMES},
    "observation.images.front": {"dtype": "video", "shape": [64, 64, 3], "names": NAMES},
}
LENGTHS = [12, 7, 9]


def make_frame(rng: np.random.Generator, ep: int, t: int) -> dict:
    """One frame of every feature type; camera content encodes (ep, t) so wrong frames are caught."""
    front = np.zeros((64, 64, 3), np.uint8)
    front[..., 0], front[..., 1], front[..., 2] = 20 * t, 80 * ep, 128
    return {
        "observation.state": rng.normal(size=6).astype(np.float32),
        "action": rng.normal(size=6),
        "next.reward": np.float32(t == LENGTHS[ep] - 1),
        "next.done": t == LENGTHS[ep] - 1,
        "counter": np.int32(100 * ep + t),
        "mask": rng.integers(0, 2, size=3).astype(np.uint8),
        "grid": (np.arange(6, dtype=np.int16) * (t + 1)).reshape(2, 3),
        "volume": rng.normal(size=(2, 2, 2)).astype(np.float32),
        "empty": np.zeros(0, np.float32),
        "language": f"episode {ep} step {t}",
        "observation.images.wrist": rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8),
        "observation.images.front": front,
    }


def write(root: Path, **kwargs: int) -> list[list[dict]]:
    rng = np.random.default_rng(7)
    frames = [[make_frame(rng, ep, t) for t in range(n)] for ep, n in enumerate(LENGTHS)]
    with LeRobotWriter.create(root, fps=20, features=FEATURES, robot_type="so101", **kwargs) as writer:
        for ep, episode in enumerate(frames):
            for frame in episode:
                writer.add_frame(frame, task=["reach red", "reach blue"][ep % 2])
            assert writer.save_episode() == ep
    return frames


def check_round_trip(root: Path, frames: list[list[dict]]) -> LeRobotDataset:
    ds = LeRobotDataset(root)
    assert (ds.num_episodes, len(ds), ds.tasks) == (3, sum(LENGTHS), ["reach red", "reach blue"])
    for ep, episode in enumerate(frames):
        data = ds.episode(ep)
        for key in ("observation.state", "action", "mask", "grid", "volume", "empty", "counter", "next.done"):
            want = np.stack([np.asarray(f[key], dtype=FEATURES[key]["dtype"]) for f in episode])
            np.testing.assert_array_equal(data[key].reshape(want.shape), want, err_msg=key)
            assert data[key].dtype == np.dtype(FEATURES[key]["dtype"])
        assert data["language"].tolist() == [f["language"] for f in episode]
        wrist = ds.episode_frames(ep, "observation.images.wrist")
        np.testing.assert_array_equal(wrist, np.stack([f["observation.images.wrist"] for f in episode]))
        front = ds.episode_frames(ep, "observation.images.front").astype(np.float64)
        source = np.stack([f["observation.images.front"] for f in episode]).astype(np.float64)
        # Lossy AV1 + yuv420p: a few levels per channel; neighbouring frames differ by 20 in red.
        assert np.abs(front.mean(axis=(1, 2)) - source.mean(axis=(1, 2))).max() < 5.0
        assert ds.episode_task(ep) == ["reach red", "reach blue"][ep % 2]
    item = ds[LENGTHS[0] + 2]
    assert item["frame_index"] == 2 and item["episode_index"] == 1 and item["task"] == "reach blue"
    assert item["observation.images.front"].shape == (3, 64, 64)
    assert item["observation.images.wrist"].dtype == np.float32 and item["counter"].shape == ()
    return ds


def test_round_trip_every_feature_type(tmp_path: Path) -> None:
    frames = write(tmp_path / "ds")
    ds = check_round_trip(tmp_path / "ds", frames)
    # One data file with one row group per episode, one mp4 holding the episodes back to back.
    assert pq.ParquetFile(tmp_path / "ds/data/chunk-000/file-000.parquet").num_row_groups == 3
    spans = [
        (r["videos/observation.images.front/from_timestamp"], r["videos/observation.images.front/to_timestamp"])
        for r in ds.episodes
    ]
    assert spans == [(0.0, 12 / 20), (12 / 20, 19 / 20), (19 / 20, 28 / 20)]
    # Dataset stats are the stats of all frames (mean/min/max exact; std pooled exactly).
    state = ds.column("observation.state").astype(np.float64)
    direct = feature_stats(state)
    for stat in ("min", "max", "mean", "std"):
        np.testing.assert_allclose(ds.stats["observation.state"][stat], direct[stat], rtol=1e-9, atol=1e-12)
    assert ds.stats["observation.images.front"]["mean"].shape == (3, 1, 1)
    np.testing.assert_allclose(ds.stats["observation.images.front"]["mean"].reshape(3)[2], 128 / 255)
    assert "language" not in ds.stats


def test_files_roll_over_into_new_files_and_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Roll over after every episode: the writer's rewrite limits (info.json's limits must stay >= 1 MB).
    monkeypatch.setattr(writer_module, "MAX_REWRITE_DATA_MB", 0)
    monkeypatch.setattr(writer_module, "MAX_REWRITE_VIDEO_MB", 0)
    frames = write(tmp_path / "ds", chunks_size=2)
    ds = check_round_trip(tmp_path / "ds", frames)
    data_files = sorted(p.relative_to(tmp_path / "ds").as_posix() for p in (tmp_path / "ds/data").rglob("*.parquet"))
    assert data_files == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-001/file-000.parquet",
    ]
    assert [r["videos/observation.images.front/from_timestamp"] for r in ds.episodes] == [0.0, 0.0, 0.0]


def test_delta_timestamps_windows(tmp_path: Path) -> None:
    write(tmp_path / "ds")
    ds = LeRobotDataset(
        tmp_path / "ds",
        delta_timestamps={"action": [-1 / 20, 0, 1 / 20, 2 / 20], "observation.images.front": [-1 / 20, 0.0]},
    )
    item = ds[LENGTHS[0] - 2]  # second-to-last frame of episode 0
    actions = ds.column("action")
    np.testing.assert_array_equal(item["action"], actions[[9, 10, 11, 11]])
    assert item["action_is_pad"].tolist() == [False, False, False, True]
    first = ds[LENGTHS[0]]  # first frame of episode 1: the past frame is padded with itself
    assert first["observation.images.front_is_pad"].tolist() == [True, False]
    np.testing.assert_array_equal(first["observation.images.front"][0], first["observation.images.front"][1])
    with pytest.raises(ValueError, match="not multiples of 1/20"):
        LeRobotDataset(tmp_path / "ds", delta_timestamps={"action": [0.033]})


def test_layout_matches_lerobot_written_fixture(tmp_path: Path) -> None:
    """Same features as the LeRobot fixture -> same info keys, column names and parquet types."""
    if not FIXTURE.is_dir():
        pytest.fail(f"LeRobot fixture not found at {FIXTURE} (tests/fixtures/lerobot_v3, or $ROBOT_RL_FIXTURES)")
    theirs_info = json.loads((FIXTURE / "meta/info.json").read_text())
    features = {
        k: copy.deepcopy(v)
        for k, v in theirs_info["features"].items()
        if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
    }
    for spec in features.values():
        spec.pop("info", None)
    root = tmp_path / "ours"
    with LeRobotWriter.create(root, fps=30, features=features, robot_type="so101_follower") as writer:
        for t in range(5):
            writer.add_frame(
                {
                    "observation.state": np.zeros(6, np.float32),
                    "action": np.ones(6, np.float32),
                    "observation.images.front": np.full((64, 64, 3), t, np.uint8),
                    "next.reward": np.float32(0),
                    "next.done": False,
                },
                task="reach the red target",
            )
        writer.save_episode()
    ours_info = json.loads((root / "meta/info.json").read_text())
    assert list(ours_info) == list(theirs_info)
    assert ours_info["features"] == theirs_info["features"]  # includes the video encoder info block
    for rel in ("data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet", "meta/tasks.parquet"):
        ours_schema, theirs_schema = pq.read_schema(root / rel), pq.read_schema(FIXTURE / rel)
        assert ours_schema.remove_metadata().equals(theirs_schema.remove_metadata()), rel
    ours_meta = pq.read_schema(root / "meta/tasks.parquet").metadata[b"pandas"]
    assert json.loads(ours_meta)["index_columns"] == ["task"]
    ours_hf = json.loads(pq.read_schema(root / "data/chunk-000/file-000.parquet").metadata[b"huggingface"])
    theirs_hf = json.loads(pq.read_schema(FIXTURE / "data/chunk-000/file-000.parquet").metadata[b"huggingface"])
    assert ours_hf["info"]["features"] == theirs_hf["info"]["features"]
    ours_stats = json.loads((root / "meta/stats.json").read_text())
    theirs_stats = json.loads((FIXTURE / "meta/stats.json").read_text())
    assert sorted(ours_stats) == sorted(theirs_stats)
    assert {k: sorted(v) for k, v in ours_stats.items()} == {k: sorted(v) for k, v in theirs_stats.items()}
