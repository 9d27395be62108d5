"""Bad input and damaged files give clear errors; crashes never lose committed episodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robot_rl.data.lerobot import DatasetFormatError, LeRobotDataset, LeRobotWriter

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [3], "names": None},
    "action": {"dtype": "float32", "shape": [3], "names": None},
    "observation.images.cam": {"dtype": "video", "shape": [64, 64, 3], "names": ["height", "width", "channels"]},
}


def frame(ep: int, t: int) -> dict:
    return {
        "observation.state": np.full(3, 10 * ep + t, np.float32),
        "action": np.full(3, t, np.float32),
        "observation.images.cam": np.full((64, 64, 3), 30 * t % 256, np.uint8),
    }


def record(writer: LeRobotWriter, ep: int, n: int = 6) -> None:
    for t in range(n):
        writer.add_frame(frame(ep, t), task="reach")
    writer.save_episode()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    with LeRobotWriter.create(root, fps=10, features=FEATURES) as writer:
        record(writer, 0)
        record(writer, 1)
    return root


def test_add_frame_rejects_bad_values(tmp_path: Path) -> None:
    with LeRobotWriter.create(tmp_path / "ds", fps=10, features=FEATURES) as writer:
        good = frame(0, 0)
        with pytest.raises(ValueError, match=r"'observation.state' expects shape \(3,\)"):
            writer.add_frame({**good, "observation.state": np.zeros(4, np.float32)}, task="t")
        with pytest.raises(ValueError, match=r"missing \['action'\]"):
            writer.add_frame({k: v for k, v in good.items() if k != "action"}, task="t")
        with pytest.raises(ValueError, match="NaN"):
            writer.add_frame({**good, "action": np.array([0, np.nan, 0], np.float32)}, task="t")
        with pytest.raises(ValueError, match="does not cast safely"):
            writer.add_frame({**good, "action": np.array([1 + 2j, 0, 0])}, task="t")
        with pytest.raises(ValueError, match="uint8 frames of shape \\(64, 64, 3\\)"):
            writer.add_frame({**good, "observation.images.cam": np.zeros((32, 32, 3), np.uint8)}, task="t")
        with pytest.raises(ValueError, match="needs a task"):
            writer.add_frame(good)
        with pytest.raises(ValueError, match="no frames"):
            writer.save_episode()
    with pytest.raises(ValueError, match="fps must be a positive int"):
        LeRobotWriter.create(tmp_path / "other", fps=29.97, features=FEATURES)  # type: ignore[arg-type]
    with pytest.raises(FileExistsError, match="resume"):
        LeRobotWriter.create(tmp_path / "ds", fps=10, features=FEATURES)


def test_truncated_data_file_names_the_file(dataset: Path) -> None:
    path = dataset / "data/chunk-000/file-000.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DatasetFormatError, match=r"file-000\.parquet is corrupt or truncated"):
        LeRobotDataset(dataset)


@pytest.mark.parametrize("keep", [0, 1 / 3, 0.9])
def test_truncated_video_is_refused_on_open_naming_the_file(dataset: Path, keep: float) -> None:
    path = dataset / "videos/observation.images.cam/chunk-000/file-000.mp4"
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
    with pytest.raises(DatasetFormatError, match=r"video file .*file-000\.mp4 .*(corrupt|truncated)"):
        LeRobotDataset(dataset)  # metadata and parquet are fine; the open decode-checks every video file


def test_garbage_video_is_refused_on_open(dataset: Path) -> None:
    path = dataset / "videos/observation.images.cam/chunk-000/file-000.mp4"
    path.write_bytes(b"not an mp4 at all" * 100)
    with pytest.raises(DatasetFormatError, match=r"file-000\.mp4 cannot be opened or decoded"):
        LeRobotDataset(dataset)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda info: info.update(codebase_version="v2.1"), "convert_dataset_v21_to_v30"),
        (lambda info: info.pop("fps"), "'fps' must be int"),
        (lambda info: info["features"].pop("timestamp"), "default feature 'timestamp'"),
        (lambda info: info["features"]["action"].update(dtype="complex64"), "dtype 'complex64' is not supported"),
        (lambda info: info.update(total_frames=13), "counts 13 frames"),
        (lambda info: info["features"]["action"].update(shape=[4]), "column 'action' has type"),
    ],
)
def test_bad_info_json(dataset: Path, edit, message: str) -> None:
    info = json.loads((dataset / "meta/info.json").read_text())
    edit(info)
    (dataset / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError, match=message):
        LeRobotDataset(dataset)


def test_timestamps_inconsistent_with_fps_are_rejected(dataset: Path) -> None:
    path = dataset / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    ts = table["timestamp"].to_numpy().copy()
    ts[3] += 0.05  # half a frame late at 10 fps
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", pa.array(ts, pa.float32()))
    pq.write_table(table, path)
    with pytest.raises(DatasetFormatError, match="not 1/10s apart"):
        LeRobotDataset(dataset)


def test_process_killed_mid_episode_keeps_saved_episodes(tmp_path: Path) -> None:
    """Atomic renames alone (durable=False: no fsync) keep saved episodes when the process dies."""
    root = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_lerobot_errors import FEATURES, frame, record
        from robot_rl.data.lerobot import LeRobotWriter
        writer = LeRobotWriter.create({str(root)!r}, fps=10, features=FEATURES, durable=False)
        record(writer, 0)
        record(writer, 1)
        for t in range(4):
            writer.add_frame(frame(2, t), task="reach")
        os._exit(3)  # killed: no save, no close
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    ds = LeRobotDataset(root)
    assert (ds.num_episodes, len(ds)) == (2, 12)
    np.testing.assert_array_equal(ds.episode(1)["observation.state"][:, 0], 10 + np.arange(6))
    with LeRobotWriter.resume(root) as writer:  # scratch video of the lost episode is cleaned up
        record(writer, 2)
    ds = LeRobotDataset(root)
    assert ds.num_episodes == 3 and not (root / ".recording").exists()
    frames = ds.episode_frames(2, "observation.images.cam")
    assert abs(frames[3].astype(float).mean() - 90) < 4


@pytest.mark.parametrize("renames_before_crash", [0, 1, 2, 3, 4, 5])
def test_crash_inside_commit_is_repaired(
    dataset: Path, monkeypatch: pytest.MonkeyPatch, renames_before_crash: int
) -> None:
    """Commit order: data, video, episodes, tasks, stats, info.json; a crash may fall between any two."""
    stats_before = (dataset / "meta/stats.json").read_text()
    real_replace = os.replace
    calls = []

    def crash(src: str, dst: str) -> None:
        calls.append(Path(dst).name)
        if len(calls) > renames_before_crash:
            raise OSError("simulated power loss")
        real_replace(src, dst)

    writer = LeRobotWriter.resume(dataset)
    for t in range(6):
        writer.add_frame(frame(2, t), task="a new task")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power loss"):
        writer.save_episode()
    monkeypatch.setattr(os, "replace", real_replace)
    with pytest.raises(RuntimeError, match="resume"):
        writer.add_frame(frame(3, 0), task="reach")  # the writer refuses to continue from a half-commit
    if renames_before_crash == 5:
        assert calls == [
            "file-000.parquet",
            "file-000.mp4",
            "file-000.parquet",
            "tasks.parquet",
            "stats.json",
            "info.json",
        ]
    if renames_before_crash >= 1:
        with pytest.raises(DatasetFormatError, match=r"resume|counts"):
            LeRobotDataset(dataset)  # 18 rows on disk, 12 committed
    LeRobotWriter.resume(dataset).close()  # repair alone gives back the committed dataset
    ds = LeRobotDataset(dataset)
    assert (ds.num_episodes, len(ds), ds.tasks) == (2, 12, ["reach"])
    assert (dataset / "meta/stats.json").read_text() == stats_before
    assert len(ds.episode_frames(1, "observation.images.cam")) == 6
    with LeRobotWriter.resume(dataset) as writer:
        record(writer, 5, n=4)
    ds = LeRobotDataset(dataset)
    assert (ds.num_episodes, len(ds)) == (3, 16)
    np.testing.assert_array_equal(ds.episode(2)["observation.state"][:, 0], 50 + np.arange(4))
    assert ds.episodes[2]["videos/observation.images.cam/from_timestamp"] == pytest.approx(1.2)
    means = ds.episode_frames(2, "observation.images.cam").reshape(4, -1).mean(axis=1)
    np.testing.assert_allclose(means, 30 * np.arange(4), atol=4)


def test_reader_accepts_other_camera_layouts_and_float_fps(dataset: Path) -> None:
    """Older LeRobot datasets declare cameras channels-first and some write fps as 30.0."""
    info = json.loads((dataset / "meta/info.json").read_text())
    info["fps"] = 10.0
    info["features"]["observation.images.cam"].update(shape=[3, 64, 64], names=["channels", "height", "width"])
    (dataset / "meta/info.json").write_text(json.dumps(info))
    ds = LeRobotDataset(dataset)
    assert ds.fps == 10 and ds[7]["observation.images.cam"].shape == (3, 64, 64)
    assert ds.episode_frames(1, "observation.images.cam").shape == (6, 64, 64, 3)
    with pytest.raises(ValueError, match="not \\(height, width, 3\\)"):
        LeRobotWriter.resume(dataset)
    with pytest.raises(ValueError, match="declare \\(height, width, 3\\)"):
        LeRobotWriter.create(
            dataset.parent / "rgba",
            fps=10,
            features={"cam": {"dtype": "video", "shape": [64, 64, 4], "names": ["height", "width", "channels"]}},
        )


def test_timestamps_handed_to_the_writer_must_follow_fps(tmp_path: Path) -> None:
    with LeRobotWriter.create(tmp_path / "ds", fps=10, features=FEATURES) as writer:
        for t in (0.0, 0.1, 0.25):
            writer.add_frame(frame(0, 0), task="reach", timestamp=t)
        with pytest.raises(ValueError, match=r"not 1/10s apart; resample"):
            writer.save_episode()
        writer.discard_episode()
        for t in (0.5, 0.6):
            writer.add_frame(frame(0, 0), task="reach", timestamp=t)
        with pytest.raises(ValueError, match="with video features an episode starts at 0"):
            writer.save_episode()
        writer.discard_episode()
        for t in (0.0, 0.1):
            writer.add_frame(frame(0, 0), task="reach", timestamp=t)
        writer.save_episode()
    assert LeRobotDataset(tmp_path / "ds").num_frames == 2


def test_dataset_with_no_episodes_reads_as_empty(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from robot_rl.cli import main

    LeRobotWriter.create(tmp_path / "empty", fps=10, features=FEATURES).close()
    ds = LeRobotDataset(tmp_path / "empty")
    assert (len(ds), ds.num_episodes, ds.column("action").shape) == (0, 0, (0, 3))
    with pytest.raises(IndexError):
        ds[0]
    assert main(["dataset", "info", str(tmp_path / "empty")]) == 0
    assert "episodes    0   frames 0" in capsys.readouterr().out


def test_video_times_without_a_frame_are_named(dataset: Path) -> None:
    from robot_rl.data.lerobot.video import decode_frames

    path = dataset / "videos/observation.images.cam/chunk-000/file-000.mp4"
    frames = decode_frames(path, np.array([0.3, 0.0, 0.3]))  # any order, repeats allowed
    assert frames.shape == (3, 64, 64, 3) and np.array_equal(frames[0], frames[2])
    with pytest.raises(DatasetFormatError, match=r"no frame within 0\.0001s of t=0\.050000s"):
        decode_frames(path, np.array([0.0, 0.05]))  # halfway between two frames at 10 fps
    with pytest.raises(DatasetFormatError, match="no frame"):
        decode_frames(path, np.array([5.0]))  # past the end of the 1.2 s file
