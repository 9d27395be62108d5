"""Commit an episode's staged files, and recover a dataset whose last commit was interrupted.

An episode commit renames, in order: the data parquet, each chunk mp4, the episodes parquet,
``meta/tasks.parquet``, ``meta/stats.json`` and last ``meta/info.json``. A crash between two renames
leaves files that already hold the new episode beside an ``info.json`` that does not count it;
:func:`repair` cuts every file back to the episodes ``info.json`` counts. A recorder killed before its
first ``info.json`` leaves only temporary files (:func:`only_crash_leftovers`). :func:`check_after_crash`
says whether a dataset folder left by a kill is readable (after repair) and how many episodes it kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import av
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robot_rl.data.lerobot import meta
from robot_rl.data.lerobot.errors import DatasetFormatError
from robot_rl.data.lerobot.stats import aggregate_dataset

SCRATCH_DIR = ".recording"


def commit_staged(staged: list[tuple[Path, Path]], durable: bool = True) -> None:
    """Rename every staged ``(tmp, final)`` file over its target, in order.

    ``durable``: fsync the files before and their folders after, so the commit survives a power loss.
    """
    for tmp, _ in staged if durable else []:
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    for tmp, final in staged:
        os.replace(tmp, final)
    for folder in dict.fromkeys(final.parent for _, final in staged) if durable else []:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def is_crash_leftover(path: Path, root: Path) -> bool:
    """True for a temporary file of an interrupted commit or anything in the writer's scratch folder."""
    rel = path.relative_to(root)
    return rel.parts[0] == SCRATCH_DIR or (path.name.startswith(".") and ".tmp-" in path.name)


def only_crash_leftovers(root: Path) -> bool:
    """True when ``root`` holds no file but crash leftovers (a recorder killed before it wrote ``info.json``)."""
    return all(is_crash_leftover(p, root) for p in root.rglob("*") if not p.is_dir())


def check_after_crash(root: str | Path, repair_first: bool = True) -> tuple[bool, int]:
    """``(readable, episodes_kept)`` of a dataset folder a killed recorder left behind.

    ``readable``: :class:`~robot_rl.data.lerobot.LeRobotDataset` opens it with every structural and video
    check passing (after :meth:`LeRobotWriter.resume`'s repair when ``repair_first`` and the plain open
    fails, as ``robot-rl record --resume`` does). ``episodes_kept``: the complete episodes it then holds
    (0 when unreadable, or when the recorder died before its first ``info.json``: nothing to keep).
    """
    from robot_rl.data.lerobot.reader import LeRobotDataset
    from robot_rl.data.lerobot.writer import LeRobotWriter

    root = Path(root)
    if not (root / meta.INFO_PATH).is_file():
        return (not root.exists() or only_crash_leftovers(root)), 0
    try:
        return True, LeRobotDataset(root).num_episodes
    except DatasetFormatError:
        if not repair_first:
            return False, 0
    try:
        LeRobotWriter.resume(root).close()
        return True, LeRobotDataset(root).num_episodes
    except DatasetFormatError:
        return False, 0


def repair(root: Path, info: meta.DatasetInfo) -> tuple[list[dict[str, Any]], list[str]]:
    """Cut ``root`` back to the episodes ``info`` counts; returns their episode rows and the tasks.

    Removes temporary and scratch files, data rows and files past ``total_frames``, video past each
    file's last committed episode, episode rows past ``total_episodes``, tasks past ``total_tasks``,
    and rebuilds ``meta/stats.json`` from the committed episodes.
    """
    for stray in root.rglob(".*.tmp-*"):
        stray.unlink()
    shutil.rmtree(root / SCRATCH_DIR, ignore_errors=True)
    rows = _repair_episodes(root, info)
    _repair_data(root, info, rows)
    for key in info.video_keys:
        _repair_video(root, key, info, rows)
    tasks = meta.load_tasks(root) if (root / meta.TASKS_PATH).is_file() else []
    if len(tasks) < info.total_tasks:
        raise DatasetFormatError(
            f"{root / meta.TASKS_PATH} holds {len(tasks)} tasks but meta/info.json counts "
            f"{info.total_tasks}; the dataset cannot be resumed safely"
        )
    if len(tasks) > info.total_tasks:
        tasks = tasks[: info.total_tasks]
        meta.write_parquet_atomic(root / meta.TASKS_PATH, meta.tasks_table(tasks))
    if rows:
        meta.save_stats(root, aggregate_dataset([meta.episode_stats_from_row(r, info.features) for r in rows]))
    return rows, tasks


def _repair_episodes(root: Path, info: meta.DatasetInfo) -> list[dict[str, Any]]:
    """Drop episode rows past ``total_episodes`` from the episodes parquet files."""
    folder = root / "meta" / "episodes"
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("chunk-*/file-*.parquet")):
        table = meta.read_parquet(path)
        keep = pc.less(table["episode_index"], info.total_episodes)
        if not pc.any(keep).as_py():
            path.unlink()
            continue
        if not pc.all(keep).as_py():
            table = table.filter(keep)
            meta.write_parquet_atomic(path, table)
        rows += table.to_pylist()
    rows.sort(key=lambda r: r["episode_index"])
    if [r["episode_index"] for r in rows] != list(range(info.total_episodes)):
        raise DatasetFormatError(
            f"{root}: meta/info.json counts {info.total_episodes} episodes but the episodes "
            f"metadata holds {len(rows)}; the dataset cannot be resumed safely"
        )
    return rows


def _repair_data(root: Path, info: meta.DatasetInfo, rows: list[dict[str, Any]]) -> None:
    """Drop data files no episode uses and rows past ``total_frames``."""
    used = {(r["data/chunk_index"], r["data/file_index"]) for r in rows}
    for path in sorted((root / "data").glob("chunk-*/file-*.parquet")):
        if (int(path.parent.name[6:]), int(path.stem[5:])) not in used:
            path.unlink()
            continue
        table = meta.read_parquet(path)
        keep = pc.less(table["index"], info.total_frames)
        if not pc.all(keep).as_py():
            kept = table.filter(keep)
            sizes, left = [], kept.num_rows
            for n in _row_group_sizes(path):
                if left <= 0:
                    break
                sizes.append(min(n, left))
                left -= n
            meta.write_parquet_atomic(path, kept, sizes)


def _row_group_sizes(path: Path) -> list[int]:
    """Rows per row group (one per episode) of a parquet file."""
    metadata = pq.read_metadata(path)
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def _repair_video(root: Path, key: str, info: meta.DatasetInfo, rows: list[dict[str, Any]]) -> None:
    """Drop chunk mp4s no episode uses and video past each file's last committed episode."""
    ends: dict[tuple[int, int], float] = {}
    for r in rows:
        loc = (r[f"videos/{key}/chunk_index"], r[f"videos/{key}/file_index"])
        ends[loc] = max(ends.get(loc, 0.0), float(r[f"videos/{key}/to_timestamp"]))
    for path in sorted((root / "videos" / key).glob("chunk-*/file-*.mp4")):
        loc = (int(path.parent.name[6:]), int(path.stem[5:]))
        if loc not in ends:
            path.unlink()
        else:
            trim_video(path, ends[loc], info.fps)


def video_end_s(path: Path) -> float:
    """Presentation time (s) just after the last frame of ``path``'s video stream."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        end = 0.0
        for packet in container.demux(stream):
            if packet.pts is not None:
                end = max(end, float((packet.pts + (packet.duration or 0)) * stream.time_base))
        return end


def trim_video(path: Path, end_s: float, fps: int) -> bool:
    """Drop every frame at or after ``end_s`` (seconds) from ``path``, atomically; True if it changed.

    Packets are copied, not re-encoded; frames of the committed episodes keep their timestamps.
    """
    cutoff = end_s - 0.5 / fps
    if video_end_s(path) <= end_s + 0.5 / fps:
        return False
    with meta.atomic_path(path) as tmp, av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4") as out:
        stream = src.streams.video[0]
        out_stream = out.add_stream_from_template(stream, opaque=True)
        for packet in src.demux(stream):
            if packet.dts is None or packet.pts is None or float(packet.pts * stream.time_base) >= cutoff:
                continue
            packet.stream = out_stream
            out.mux(packet)
    return True
