"""The structural checks LeRobot's loader relies on, applied to a dataset read from disk.

- every declared non-video feature has a parquet column of a compatible type;
- episodes are numbered 0..E-1, lengths positive, ``[dataset_from_index, dataset_to_index)`` ranges
  contiguous from 0 and summing to ``total_frames``; ``total_episodes``/``total_tasks`` agree;
- the ``index`` column is 0..N-1; each row's ``episode_index`` and ``frame_index`` agree with its range;
- ``task_index`` lies in the tasks table; timestamps increase by 1/fps within ``tolerance_s``;
- each video span ``to_timestamp - from_timestamp`` equals ``length / fps``; its file exists, opens,
  decodes a first frame and lasts at least until its last episode's ``to_timestamp``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa

from robot_rl.data.lerobot.errors import DatasetFormatError
from robot_rl.data.lerobot.features import arrow_type
from robot_rl.data.lerobot.meta import DatasetInfo


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Equal types, or the same nesting with fixed/variable list and float widths interchangeable."""
    if actual.equals(expected):
        return True
    listy = (pa.types.is_list, pa.types.is_fixed_size_list, pa.types.is_large_list)
    if any(f(actual) for f in listy) and any(f(expected) for f in listy):
        fixed = pa.types.is_fixed_size_list
        if fixed(actual) and fixed(expected) and actual.list_size != expected.list_size:
            return False
        return _compatible(actual.value_type, expected.value_type)
    return False


def check_columns(info: DatasetInfo, schema: pa.Schema, source: str) -> None:
    """Every stored feature has a column of a compatible type."""
    for key, feature in info.features.items():
        if feature.dtype == "video":
            continue
        if key not in schema.names:
            raise DatasetFormatError(f"{source}: feature {key!r} declared in meta/info.json has no column")
        actual = schema.field(key).type
        if not _compatible(actual, arrow_type(feature)):
            raise DatasetFormatError(
                f"{source}: column {key!r} has type {actual}, but meta/info.json declares "
                f"{feature.dtype} {feature.shape} (stored as {arrow_type(feature)})"
            )


def check_episodes(info: DatasetInfo, rows: list[dict[str, Any]], num_tasks: int) -> None:
    """Episode numbering, ranges and totals."""
    if len(rows) != info.total_episodes:
        raise DatasetFormatError(
            f"meta/info.json counts {info.total_episodes} episodes; meta/episodes holds {len(rows)}. If a "
            "recording crashed while committing an episode, LeRobotWriter.resume(root) repairs the dataset."
        )
    if num_tasks != info.total_tasks:
        raise DatasetFormatError(
            f"meta/info.json counts {info.total_tasks} tasks; meta/tasks.parquet holds {num_tasks}"
        )
    video_columns = [f"videos/{key}/{c}" for key in info.video_keys
                     for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    expected_from = 0
    for i, row in enumerate(rows):
        missing = [c for c in video_columns if row.get(c) is None]
        if missing:
            raise DatasetFormatError(f"episode {row['episode_index']}: meta/episodes lacks {missing}; restore the "
                                     "episodes parquet from a copy")
        if row["episode_index"] != i:
            raise DatasetFormatError(
                f"episode indices must be 0..{len(rows) - 1}; found {row['episode_index']} at position {i}"
            )
        start, stop, length = row["dataset_from_index"], row["dataset_to_index"], row["length"]
        if length <= 0 or stop - start != length or start != expected_from:
            raise DatasetFormatError(
                f"episode {i}: index range [{start}, {stop}) with length {length} does not continue the "
                f"previous episode (expected to start at {expected_from})"
            )
        expected_from = stop
        for key in info.video_keys:
            span = row[f"videos/{key}/to_timestamp"] - row[f"videos/{key}/from_timestamp"]
            if abs(span - length / info.fps) > 1.0 / info.fps:
                raise DatasetFormatError(
                    f"episode {i}: video {key!r} spans {span:.4f}s, but {length} frames at "
                    f"{info.fps} fps last {length / info.fps:.4f}s"
                )
    if expected_from != info.total_frames:
        raise DatasetFormatError(
            f"meta/info.json counts {info.total_frames} frames; the episodes cover {expected_from}"
        )


def check_frames(
    info: DatasetInfo,
    rows: list[dict[str, Any]],
    columns: dict[str, np.ndarray],
    num_tasks: int,
    tolerance_s: float,
) -> None:
    """Row-level checks of the default columns (arrays ``[num_frames]``)."""
    n = len(columns["index"])
    if n != info.total_frames:
        raise DatasetFormatError(
            f"the data parquet files hold {n} rows but meta/info.json counts {info.total_frames} frames. "
            "If a recording crashed while committing an episode, "
            "LeRobotWriter.resume(root) trims the extra rows."
        )
    if not np.array_equal(columns["index"], np.arange(n)):
        bad = int(np.flatnonzero(columns["index"] != np.arange(n))[0])
        raise DatasetFormatError(
            f"column 'index' must be 0..{n - 1} in file order; row {bad} holds {columns['index'][bad]}"
        )
    task_index = columns["task_index"]
    if n and (task_index.min() < 0 or task_index.max() >= num_tasks):
        raise DatasetFormatError(
            f"task_index values {sorted(set(task_index.tolist()))} fall outside the "
            f"{num_tasks} tasks of meta/tasks.parquet"
        )
    for row in rows:
        start, stop, ep = row["dataset_from_index"], row["dataset_to_index"], row["episode_index"]
        if not (columns["episode_index"][start:stop] == ep).all():
            raise DatasetFormatError(f"rows {start}..{stop - 1} should all have episode_index {ep}")
        if not np.array_equal(columns["frame_index"][start:stop], np.arange(stop - start)):
            raise DatasetFormatError(f"episode {ep}: frame_index must count 0..{stop - start - 1}")
        ts = columns["timestamp"][start:stop].astype(np.float64)
        steps = np.diff(ts)
        if (steps <= 0).any():
            raise DatasetFormatError(f"episode {ep}: timestamps must increase (frame {int(np.argmin(steps)) + 1})")
        off = np.abs(steps - 1.0 / info.fps)
        if (off > tolerance_s).any():
            k = int(off.argmax())
            raise DatasetFormatError(
                f"episode {ep}: timestamps {ts[k]:.6f} -> {ts[k + 1]:.6f}s are not 1/{info.fps}s apart "
                f"(tolerance {tolerance_s}s); the recording dropped or repeated frames"
            )


def check_video_files(root: Path, info: DatasetInfo, rows: list[dict[str, Any]]) -> None:
    """Every video file an episode points to exists, opens, decodes a frame and lasts past its last episode."""
    assert info.video_path is not None or not info.video_keys
    ends: dict[Path, tuple[float, int]] = {}
    for row in rows:
        for key in info.video_keys:
            path = root / info.video_path.format(
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            )
            if not path.is_file():
                raise DatasetFormatError(f"episode {row['episode_index']}: video file {path} is missing")
            end = float(row[f"videos/{key}/to_timestamp"])
            if path not in ends or end > ends[path][0]:
                ends[path] = (end, row["episode_index"])
    for path, (end, episode) in ends.items():
        probe_video(path, end - 1.0 / info.fps, episode)


def probe_video(path: Path, last_frame_s: float, episode: int) -> None:
    """Open ``path``, decode its first frame and the frame shown at ``last_frame_s`` (episode ``episode``'s last).

    Two seeks and a few decoded frames, not the whole file. A zero-byte, garbage or truncated file (its
    index intact but its last frames cut off, or its index missing) raises a :class:`DatasetFormatError`
    naming it.
    """
    fix = "Restore it from a copy or re-record its episodes."
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DatasetFormatError(f"video file {path} holds no video stream; it is corrupt or truncated. {fix}")
            stream = container.streams.video[0]
            if next(container.decode(stream), None) is None:
                raise DatasetFormatError(f"video file {path} holds no decodable frame; it is corrupt or truncated. "
                                         f"{fix}")
            container.seek(max(0, int(last_frame_s / stream.time_base) - 1), stream=stream, backward=True)
            last = None
            for frame in container.decode(stream):
                last = float(frame.pts * stream.time_base)
                if last >= last_frame_s - 0.5e-3:
                    return
    except (av.FFmpegError, UnicodeDecodeError) as err:
        raise DatasetFormatError(f"video file {path} cannot be opened or decoded ({err}); it is corrupt or "
                                 f"truncated. {fix}") from err
    shown = "no frame" if last is None else f"its last frame at {last:.3f}s"
    raise DatasetFormatError(f"video file {path} decodes {shown}, but episode {episode} needs a frame at "
                             f"{last_frame_s:.3f}s; the file is truncated. {fix}")
