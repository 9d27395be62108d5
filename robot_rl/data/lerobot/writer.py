"""Write LeRobot v3.0 datasets, one episode at a time, crash-safely.

``add_frame`` buffers numeric values and streams camera frames to a per-episode encoder;
``save_episode`` finalises the episode: it stages every file that changes (data parquet with one
more row group, chunk mp4 with the episode remuxed onto its end, episodes parquet, tasks, stats)
as temporary files, then renames them into place, ``meta/info.json`` last. ``info.json`` is the
commit point: readers trust only what it counts. A crash mid-episode leaves the earlier episodes
intact; a crash inside the rename window can leave a data or video file holding one uncommitted
episode, which :meth:`LeRobotWriter.resume` trims before appending.

Example::

    with LeRobotWriter.create(root, fps=25, features=features, robot_type="so101") as writer:
        for t in range(T):
            writer.add_frame({"observation.state": q, "action": a}, task="reach the target")
        writer.save_episode()
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from robot_rl.data.lerobot import meta
from robot_rl.data.lerobot.features import (
    DEFAULT_FEATURES,
    Feature,
    check_frame_value,
    data_schema,
    default_features,
    numpy_to_column,
)
from robot_rl.data.lerobot.recovery import SCRATCH_DIR, commit_staged, repair
from robot_rl.data.lerobot.stats import ImageStatsAccumulator, Stats, aggregate_dataset, feature_stats
from robot_rl.data.lerobot.video import EpisodeVideoEncoder, VideoSettings, append_video, video_info

# Appending an episode rewrites the current data / video file (the old file stays valid until the
# rename), so each save costs the file's size in I/O. Files roll over at these sizes, or at the
# smaller limits of info.json, keeping a save bounded whatever the dataset size.
MAX_REWRITE_DATA_MB = 10
MAX_REWRITE_VIDEO_MB = 50


def _as_feature(key: str, spec: Feature | dict[str, Any]) -> Feature:
    """Accept a :class:`Feature` or an info.json-style dict."""
    if isinstance(spec, Feature):
        return spec
    return Feature(spec["dtype"], tuple(spec["shape"]), spec.get("names"), spec.get("info"))


def _check_timestamps(ts: np.ndarray, fps: int, has_video: bool, tolerance_s: float = 1e-4) -> None:
    """Refuse episode timestamps ``[T]`` that LeRobot's loader (and ours) would reject.

    Frames must be ``1/fps`` apart; with video they must also start at 0, since frame ``k`` of an
    episode's video is shown at ``k / fps``.
    """
    off = np.abs(np.diff(ts) - 1.0 / fps)
    if (off > tolerance_s).any():
        k = int(off.argmax())
        raise ValueError(
            f"timestamps {ts[k]:.6f} -> {ts[k + 1]:.6f}s are not 1/{fps}s apart; resample the "
            f"stream at {fps} Hz before recording (or omit timestamp= to use frame_index / fps)"
        )
    if has_video and abs(ts[0]) > tolerance_s:
        raise ValueError(f"the first timestamp is {ts[0]:.6f}s; with video features an episode starts at 0")


class LeRobotWriter:
    """Appends episodes to a LeRobot v3.0 dataset folder (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        info: meta.DatasetInfo,
        tasks: list[str],
        rows: list[dict[str, Any]],
        video: VideoSettings,
        durable: bool = True,
    ) -> None:
        """Use :meth:`create` or :meth:`resume`.

        ``durable=False`` skips the fsyncs of each commit: episodes still survive a crash of the
        process (renames are atomic) but not a power loss. Saves are then ~2x faster on a busy disk.
        """
        self.root = root
        self.info = info
        self.tasks = tasks
        self.rows = rows
        self.video = video
        self.durable = durable
        self.episode_stats = [meta.episode_stats_from_row(r, info.features) for r in rows]
        for row, stats in zip(rows, self.episode_stats, strict=True):  # older per-element stats, in LeRobot's layout
            row.update(meta.episode_stats_columns(stats))
        self._scratch = root / SCRATCH_DIR
        self._broken = False
        shutil.rmtree(self._scratch, ignore_errors=True)
        self._reset_buffer()

    # ----------------------------------------------------------------- construction
    @classmethod
    def create(
        cls,
        root: str | Path,
        fps: int,
        features: dict[str, Feature | dict[str, Any]],
        robot_type: str | None = None,
        video: VideoSettings | None = None,
        chunks_size: int = 1000,
        data_files_size_in_mb: int = 100,
        video_files_size_in_mb: int = 200,
        overwrite: bool = False,
        durable: bool = True,
    ) -> LeRobotWriter:
        """Start a new dataset at ``root``; ``features`` excludes the five default columns."""
        root = Path(root)
        if not isinstance(fps, int) or fps <= 0:
            raise ValueError(f"fps must be a positive int (LeRobot stores it as one); got {fps!r}")
        sizes = {
            "chunks_size": chunks_size,
            "data_files_size_in_mb": data_files_size_in_mb,
            "video_files_size_in_mb": video_files_size_in_mb,
        }
        bad = {k: v for k, v in sizes.items() if not isinstance(v, int) or v < 1}
        if bad:
            raise ValueError(f"{bad} must be integers >= 1 (LeRobot refuses smaller values in info.json)")
        if root.exists() and any(root.iterdir()):
            if not overwrite:
                raise FileExistsError(
                    f"{root} exists and is not empty; pass overwrite=True to replace it, "
                    "or LeRobotWriter.resume() to add episodes"
                )
            shutil.rmtree(root)
        clash = sorted(set(features) & set(DEFAULT_FEATURES))
        if clash:
            raise ValueError(f"features {clash} are default columns the writer fills in; remove them")
        parsed = {k: _as_feature(k, v) for k, v in features.items()}
        for key, feature in parsed.items():
            if feature.is_visual and feature.shape[2] != 3:
                raise ValueError(
                    f"camera {key!r} has shape {feature.shape}; the writer stores RGB frames "
                    "channels last: declare (height, width, 3)"
                )
        parsed.update(default_features())
        info = meta.DatasetInfo(
            fps=fps,
            features=parsed,
            robot_type=robot_type,
            chunks_size=chunks_size,
            data_files_size_in_mb=data_files_size_in_mb,
            video_files_size_in_mb=video_files_size_in_mb,
            video_path=meta.DEFAULT_VIDEO_PATH if any(f.dtype == "video" for f in parsed.values()) else None,
        )
        root.mkdir(parents=True, exist_ok=True)
        meta.write_json_atomic(root / meta.INFO_PATH, info.to_json())
        return cls(root, info, [], [], video or VideoSettings(), durable)

    @classmethod
    def resume(cls, root: str | Path, video: VideoSettings | None = None, durable: bool = True) -> LeRobotWriter:
        """Open an existing dataset to append episodes, first dropping anything a crash left uncommitted."""
        root = Path(root)
        info = meta.load_info(root)
        odd = {k: f.shape for k, f in info.features.items() if f.is_visual and f.shape[2] != 3}
        if odd:
            raise ValueError(
                f"cannot append to {root}: cameras {odd} are not (height, width, 3), which the writer needs"
            )
        rows, tasks = repair(root, info)
        return cls(root, info, tasks, rows, video or VideoSettings(), durable)

    # ----------------------------------------------------------------- recording
    def _reset_buffer(self) -> None:
        """Empty the current episode."""
        self._values: dict[str, list[Any]] = {}
        self._tasks: list[str] = []
        self._timestamps: list[float] = []
        self._encoders: dict[str, EpisodeVideoEncoder] = {}
        self._image_stats: dict[str, ImageStatsAccumulator] = {}

    def _check_usable(self) -> None:
        """Refuse to continue after a failed commit (the in-memory state no longer matches the disk)."""
        if self._broken:
            raise RuntimeError(
                f"a previous save_episode() failed mid-commit; reopen {self.root} with "
                "LeRobotWriter.resume(root), which drops the partial episode"
            )

    @property
    def num_frames_buffered(self) -> int:
        """Frames added to the current (unsaved) episode."""
        return len(self._tasks)

    def add_frame(self, frame: dict[str, Any], task: str | None = None, timestamp: float | None = None) -> None:
        """Add one frame: every declared feature (not the default columns), plus the task string.

        ``task`` may also be given as ``frame["task"]``. ``timestamp`` defaults to
        ``frame_index / fps``. Arrays: see :func:`check_frame_value`.
        """
        self._check_usable()
        task = task if task is not None else frame.get("task")
        if not isinstance(task, str) or not task:
            raise ValueError("each frame needs a task string: add_frame(frame, task='pick the cube')")
        expected = {k for k in self.info.features if k not in DEFAULT_FEATURES}
        given = set(frame) - {"task"}
        if given != expected:
            raise ValueError(
                f"frame keys do not match the features: missing {sorted(expected - given)}, "
                f"unexpected {sorted(given - expected)}"
            )
        checked = {k: check_frame_value(k, self.info.features[k], frame[k]) for k in sorted(expected)}
        for key, value in checked.items():
            feature = self.info.features[key]
            if feature.dtype == "video":
                self._encode(key, value)
            elif feature.dtype == "image":
                self._image_stats.setdefault(key, ImageStatsAccumulator()).add(value)
                buffer = io.BytesIO()
                Image.fromarray(value).save(buffer, format="png", compress_level=1)
                self._values.setdefault(key, []).append(buffer.getvalue())
            else:
                self._values.setdefault(key, []).append(value)
        index = len(self._tasks)
        self._timestamps.append(index / self.info.fps if timestamp is None else float(timestamp))
        self._tasks.append(task)

    def _encode(self, key: str, frame: np.ndarray) -> None:
        """Stream one camera frame into the episode's scratch mp4."""
        if key not in self._encoders:
            self._scratch.mkdir(parents=True, exist_ok=True)
            h, w, _ = self.info.features[key].shape
            path = self._scratch / f"{key}.mp4"
            self._encoders[key] = EpisodeVideoEncoder(path, w, h, self.info.fps, self.video)
            self._image_stats[key] = ImageStatsAccumulator()
        self._encoders[key].add(frame)
        self._image_stats[key].add(frame)

    def discard_episode(self) -> None:
        """Drop the frames added since the last save."""
        for encoder in self._encoders.values():
            encoder.abort()
        self._reset_buffer()

    # ----------------------------------------------------------------- saving
    def save_episode(self) -> int:
        """Finalise the buffered episode on disk (see the module docstring); returns its index."""
        self._check_usable()
        n = len(self._tasks)
        if n == 0:
            raise ValueError("save_episode() with no frames; call add_frame() first")
        ts = np.asarray(self._timestamps, dtype=np.float64)
        _check_timestamps(ts, self.info.fps, bool(self.info.video_keys))
        ep = self.info.total_episodes
        start = self.info.total_frames
        for task in dict.fromkeys(self._tasks):
            if task not in self.tasks:
                self.tasks.append(task)
        task_of = {t: i for i, t in enumerate(self.tasks)}
        columns: dict[str, np.ndarray | list[Any]] = {
            k: (np.stack(v) if v and isinstance(v[0], np.ndarray) else v) for k, v in self._values.items()
        }
        columns.update(
            {
                "timestamp": ts.astype(np.float32),
                "frame_index": np.arange(n, dtype=np.int64),
                "episode_index": np.full(n, ep, dtype=np.int64),
                "index": np.arange(start, start + n, dtype=np.int64),
                "task_index": np.array([task_of[t] for t in self._tasks], dtype=np.int64),
            }
        )
        stats: dict[str, Stats] = {k: acc.stats() for k, acc in self._image_stats.items()}
        for key, feature in self.info.features.items():
            if key in columns and feature.dtype not in ("image", "string", "video"):
                stats[key] = feature_stats(np.asarray(columns[key]))
        staged: list[tuple[Path, Path]] = []
        try:
            row = self._stage_data(columns, n, staged)
            row.update(self._stage_videos(n, staged))
            row.update(
                {
                    "episode_index": ep,
                    "tasks": list(dict.fromkeys(self._tasks)),
                    "length": n,
                    "dataset_from_index": start,
                    "dataset_to_index": start + n,
                }
            )
            row.update(meta.episode_stats_columns(stats))
            self._stage_metadata(row, stats, n, staged)
            commit_staged(staged, self.durable)
        except BaseException:
            self._broken = True
            self._reset_buffer()
            raise
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            for encoder in self._encoders.values():
                encoder.path.unlink(missing_ok=True)
        self._reset_buffer()
        return ep

    def _tmp(self, final: Path, staged: list[tuple[Path, Path]]) -> Path:
        """A temporary path to write ``final``'s new content to, renamed at commit."""
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        staged.append((tmp, final))
        return tmp

    def _next_file(self, last: tuple[int, int] | None, path_of: Any, limit_mb: int) -> tuple[int, int, bool]:
        """(chunk, file, append?) for new content: the last file if under ``limit_mb``, else the next one."""
        if last is None:
            return 0, 0, False
        chunk, file = last
        path = path_of(chunk, file)
        if path.is_file() and path.stat().st_size < limit_mb * 1024 * 1024:
            return chunk, file, True
        file += 1
        if file >= self.info.chunks_size:
            chunk, file = chunk + 1, 0
        return chunk, file, False

    def _data_path(self, chunk: int, file: int) -> Path:
        return self.root / self.info.data_path.format(chunk_index=chunk, file_index=file)

    def _stage_data(self, columns: dict[str, Any], n: int, staged: list[tuple[Path, Path]]) -> dict[str, Any]:
        """Stage the data parquet with the episode as a new row group."""
        schema = data_schema(self.info.features)
        table = pa.table(
            {f.name: numpy_to_column(columns[f.name], self.info.features[f.name]) for f in schema},
            schema=schema,
        )
        last = (self.rows[-1]["data/chunk_index"], self.rows[-1]["data/file_index"]) if self.rows else None
        limit = min(self.info.data_files_size_in_mb, MAX_REWRITE_DATA_MB)
        chunk, file, append = self._next_file(last, self._data_path, limit)
        final = self._data_path(chunk, file)
        with pq.ParquetWriter(self._tmp(final, staged), schema, compression="snappy") as out:
            if append:
                old = pq.ParquetFile(final)
                for i in range(old.num_row_groups):
                    out.write_table(old.read_row_group(i).cast(schema))
            out.write_table(table, row_group_size=max(n, 1))
        return {"data/chunk_index": chunk, "data/file_index": file}

    def _episodes_path(self, chunk: int, file: int) -> Path:
        return self.root / meta.EPISODES_PATH.format(chunk_index=chunk, file_index=file)

    def _video_path(self, key: str, chunk: int, file: int) -> Path:
        assert self.info.video_path is not None
        return self.root / self.info.video_path.format(video_key=key, chunk_index=chunk, file_index=file)

    def _stage_videos(self, n: int, staged: list[tuple[Path, Path]]) -> dict[str, Any]:
        """Close the episode encoders and stage each chunk mp4 with the episode appended."""
        out: dict[str, Any] = {}
        for key in self.info.video_keys:
            encoder = self._encoders[key]
            if encoder.close() != n:
                raise RuntimeError(f"camera {key!r} got {encoder.frames} frames for an episode of {n}")
            prev = self.rows[-1] if self.rows else None
            last = (prev[f"videos/{key}/chunk_index"], prev[f"videos/{key}/file_index"]) if prev else None
            chunk, file, append = self._next_file(
                last,
                lambda c, f, k=key: self._video_path(k, c, f),
                min(self.info.video_files_size_in_mb, MAX_REWRITE_VIDEO_MB),
            )
            start = float(prev[f"videos/{key}/to_timestamp"]) if (append and prev) else 0.0
            final = self._video_path(key, chunk, file)
            append_video(final if append else None, encoder.path, start, self._tmp(final, staged))
            if self.info.features[key].info is None:
                feature = self.info.features[key]
                self.info.features[key] = Feature(
                    feature.dtype,
                    feature.shape,
                    feature.names,
                    video_info(encoder.path, self.info.fps, self.video),
                )
            out.update(
                {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": start,
                    f"videos/{key}/to_timestamp": start + n / self.info.fps,
                }
            )
        return out

    def _stage_metadata(
        self, row: dict[str, Any], stats: dict[str, Stats], n: int, staged: list[tuple[Path, Path]]
    ) -> None:
        """Stage episodes parquet, tasks, stats and (last) info.json."""
        prev = self.rows[-1] if self.rows else None
        last = (prev["meta/episodes/chunk_index"], prev["meta/episodes/file_index"]) if prev else None
        chunk, file, _ = self._next_file(last, self._episodes_path, self.info.data_files_size_in_mb)
        row.update({"meta/episodes/chunk_index": chunk, "meta/episodes/file_index": file})
        rows = [*self.rows, row]
        same_file = [
            r for r in rows if (r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) == (chunk, file)
        ]
        pq.write_table(
            meta.episodes_table(same_file, self.info),
            self._tmp(self._episodes_path(chunk, file), staged),
            compression="snappy",
        )
        pq.write_table(meta.tasks_table(self.tasks), self._tmp(self.root / meta.TASKS_PATH, staged))
        all_stats = aggregate_dataset([*self.episode_stats, stats])
        self._tmp(self.root / meta.STATS_PATH, staged).write_text(
            json.dumps(meta.stats_to_json(all_stats), indent=4) + "\n"
        )
        self.info.total_episodes += 1
        self.info.total_frames += n
        self.info.total_tasks = len(self.tasks)
        self.info.splits = {"train": f"0:{self.info.total_episodes}"}
        try:
            self._tmp(self.root / meta.INFO_PATH, staged).write_text(json.dumps(self.info.to_json(), indent=4) + "\n")
        except OSError:
            self.info.total_episodes -= 1
            self.info.total_frames -= n
            raise
        self.rows.append(row)
        self.episode_stats.append(stats)

    # ----------------------------------------------------------------- closing
    def close(self) -> None:
        """Drop an unsaved episode and the scratch folder. Saved episodes are already final."""
        self.discard_episode()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> LeRobotWriter:
        """Context manager: ``close()`` on exit (an unsaved episode is discarded, never half-written)."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the writer."""
        self.close()
