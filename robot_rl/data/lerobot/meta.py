"""The ``meta/`` folder of a LeRobot v3.0 dataset: info.json, tasks, episodes and stats files.

Every file here is written atomically (a temporary file in the same folder, fsync, rename), so a
crash leaves either the old or the new version, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_rl.data.lerobot.errors import DatasetFormatError
from robot_rl.data.lerobot.features import DEFAULT_FEATURES, Feature
from robot_rl.data.lerobot.stats import STAT_KEYS, Stats, conform, stats_from_json, stats_shapes, stats_to_json

CODEBASE_VERSION = "v3.0"
DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INFO_PATH = "meta/info.json"
EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index")
"""Columns every ``meta/episodes`` file has (plus ``videos/<key>/*`` per camera, checked with the videos)."""
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success fsync it and rename it onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=4) + "\n")


def write_parquet_atomic(path: Path, table: pa.Table, row_group_sizes: list[int] | None = None) -> None:
    """Write ``table`` (snappy, like LeRobot) atomically; optionally split into the given row groups."""
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, table.schema, compression="snappy") as writer:
        start = 0
        for size in row_group_sizes or [table.num_rows]:
            writer.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start += size


def read_parquet(path: Path) -> pa.Table:
    """Read a parquet file, turning a truncated or corrupt file into a :class:`DatasetFormatError`."""
    if not path.is_file():
        raise DatasetFormatError(f"{path} is missing; the dataset is incomplete (copy it again or re-record)")
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise DatasetFormatError(
            f"{path} is corrupt or truncated ({err}). Restore it from a copy; if it was being written "
            f"during a crash, the dataset's earlier files are intact and only its episodes are lost."
        ) from err


@dataclass
class DatasetInfo:
    """``meta/info.json``. ``extra`` keeps keys we do not interpret, so they survive a rewrite."""

    fps: int
    features: dict[str, Feature]
    robot_type: str | None = None
    codebase_version: str = CODEBASE_VERSION
    total_episodes: int = 0
    total_frames: int = 0
    total_tasks: int = 0
    chunks_size: int = 1000
    data_files_size_in_mb: int = 100
    video_files_size_in_mb: int = 200
    data_path: str = DEFAULT_DATA_PATH
    video_path: str | None = DEFAULT_VIDEO_PATH
    splits: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def video_keys(self) -> list[str]:
        """Features stored as mp4 files, in feature order."""
        return [k for k, f in self.features.items() if f.dtype == "video"]

    def to_json(self) -> dict[str, Any]:
        """The JSON object, keys in LeRobot's order."""
        out: dict[str, Any] = {
            "codebase_version": self.codebase_version,
            "fps": self.fps,
            "features": {k: f.to_json() for k, f in self.features.items()},
            "total_episodes": self.total_episodes,
            "total_frames": self.total_frames,
            "total_tasks": self.total_tasks,
            "chunks_size": self.chunks_size,
            "data_files_size_in_mb": self.data_files_size_in_mb,
            "video_files_size_in_mb": self.video_files_size_in_mb,
            "data_path": self.data_path,
            "video_path": self.video_path,
            "robot_type": self.robot_type,
            "splits": self.splits,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, raw: Any, source: str = INFO_PATH) -> DatasetInfo:
        """Parse and check ``meta/info.json`` (the schema LeRobot's loader relies on)."""
        if not isinstance(raw, dict):
            raise DatasetFormatError(f"{source} must hold a JSON object, got {type(raw).__name__}")
        version = raw.get("codebase_version")
        if version != CODEBASE_VERSION:
            raise DatasetFormatError(
                f"{source}: codebase_version is {version!r}; only {CODEBASE_VERSION!r} is read. "
                "Convert older datasets with LeRobot "
                "(python -m lerobot.datasets.v30.convert_dataset_v21_to_v30)."
            )
        if isinstance(raw.get("fps"), float) and raw["fps"].is_integer():
            raw = {**raw, "fps": int(raw["fps"])}
        required = {
            "fps": int,
            "features": dict,
            "total_episodes": int,
            "total_frames": int,
            "total_tasks": int,
            "chunks_size": int,
            "data_path": str,
        }
        for key, kind in required.items():
            if not isinstance(raw.get(key), kind) or isinstance(raw.get(key), bool):
                raise DatasetFormatError(f"{source}: {key!r} must be {kind.__name__}, got {raw.get(key)!r}")
        for key in ("total_episodes", "total_frames", "total_tasks"):
            if raw[key] < 0:
                raise DatasetFormatError(f"{source}: {key!r} must be >= 0, got {raw[key]!r}")
        for key in ("fps", "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
            value = raw.get(key, 1)
            if not isinstance(value, int | float) or value <= 0:
                raise DatasetFormatError(f"{source}: {key!r} must be positive, got {value!r} (LeRobot refuses it too)")
        try:
            features = {k: Feature.from_json(k, v) for k, v in raw["features"].items()}
        except DatasetFormatError as err:
            raise DatasetFormatError(f"{source}: {err}") from err
        for key, spec in DEFAULT_FEATURES.items():
            if key not in features or features[key].dtype != spec["dtype"]:
                raise DatasetFormatError(f"{source}: default feature {key!r} ({spec['dtype']}) is missing")
        has_video = any(f.dtype == "video" for f in features.values())
        if has_video and not isinstance(raw.get("video_path"), str):
            raise DatasetFormatError(f"{source}: video features are declared but 'video_path' is not set")
        for key, default in (("data_path", DEFAULT_DATA_PATH), ("video_path", DEFAULT_VIDEO_PATH)):
            if isinstance(raw.get(key), str):
                try:
                    raw[key].format(video_key="observation.images.x", chunk_index=0, file_index=0)
                except (KeyError, IndexError, ValueError) as err:
                    raise DatasetFormatError(f"{source}: {key!r} = {raw[key]!r} is not a path template ({err!r}); "
                                             f"LeRobot's is {default!r}") from err
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            fps=raw["fps"],
            features=features,
            robot_type=raw.get("robot_type"),
            codebase_version=version,
            total_episodes=raw["total_episodes"],
            total_frames=raw["total_frames"],
            total_tasks=raw["total_tasks"],
            chunks_size=raw["chunks_size"],
            data_files_size_in_mb=int(raw.get("data_files_size_in_mb", 100)),
            video_files_size_in_mb=int(raw.get("video_files_size_in_mb", 200)),
            data_path=raw["data_path"],
            video_path=raw.get("video_path"),
            splits=dict(raw.get("splits") or {}),
            extra={k: v for k, v in raw.items() if k not in known},
        )


def load_description(root: Path) -> tuple[DatasetInfo, list[str]]:
    """``(info, task strings)`` of the dataset at ``root``: what describes its frames, without reading them."""
    info = load_info(root)
    return info, load_tasks(root) if info.total_tasks else []


DESCRIBING_FILES = (INFO_PATH, TASKS_PATH)
"""What describes a dataset's frames without holding them: features (info.json) and task strings."""


def copy_description(root: Path, dest: Path) -> None:
    """Copy ``root``'s :data:`DESCRIBING_FILES` (a few KB) under ``dest``, for :func:`load_info` and :func:`load_tasks`
    to read there once ``root`` has moved (a trained run keeps them: ``robot_rl.train.run_loading``)."""
    for name in DESCRIBING_FILES:
        if (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, dest / name)


def load_info(root: Path) -> DatasetInfo:
    """Read ``meta/info.json`` under ``root``."""
    path = root / INFO_PATH
    if not path.is_file():
        raise DatasetFormatError(
            f"{path} not found: {root} is not a LeRobot dataset (expected meta/info.json, data/, meta/episodes/)"
        )
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetFormatError(f"{path} is not valid JSON ({err}); restore it from a copy") from err
    return DatasetInfo.from_json(raw, str(path))


def tasks_table(tasks: list[str]) -> pa.Table:
    """``meta/tasks.parquet``: columns task_index, task; pandas metadata makes ``task`` the index."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.3.3",
    }
    schema = pa.schema(
        [("task_index", pa.int64()), ("task", pa.string())], metadata={"pandas": json.dumps(pandas_meta)}
    )
    return pa.table({"task_index": list(range(len(tasks))), "task": tasks}, schema=schema)


def load_tasks(root: Path) -> list[str]:
    """Task strings ordered by ``task_index`` (which must be 0..T-1)."""
    table = read_parquet(root / TASKS_PATH)
    if "task_index" not in table.column_names or "task" not in table.column_names:
        raise DatasetFormatError(f"{root / TASKS_PATH} needs columns task_index and task, has {table.column_names}")
    rows = sorted(zip(table["task_index"].to_pylist(), table["task"].to_pylist(), strict=True))
    if [i for i, _ in rows] != list(range(len(rows))):
        raise DatasetFormatError(
            f"{root / TASKS_PATH}: task_index must be 0..{len(rows) - 1}, got {[i for i, _ in rows]}"
        )
    return [t for _, t in rows]


def episodes_table(rows: list[dict[str, Any]], info: DatasetInfo) -> pa.Table:
    """The ``meta/episodes`` parquet table for ``rows`` (one dict per episode, LeRobot's columns)."""
    fields: list[pa.Field] = [
        pa.field("episode_index", pa.int64()),
        pa.field("tasks", pa.list_(pa.string())),
        pa.field("length", pa.int64()),
        pa.field("data/chunk_index", pa.int64()),
        pa.field("data/file_index", pa.int64()),
        pa.field("dataset_from_index", pa.int64()),
        pa.field("dataset_to_index", pa.int64()),
    ]
    for key in info.video_keys:
        fields += [
            pa.field(f"videos/{key}/chunk_index", pa.int64()),
            pa.field(f"videos/{key}/file_index", pa.int64()),
            pa.field(f"videos/{key}/from_timestamp", pa.float64()),
            pa.field(f"videos/{key}/to_timestamp", pa.float64()),
        ]
    for key, feature in info.features.items():
        if feature.dtype == "string":
            continue
        value_type: pa.DataType = pa.float64()
        for _ in range(3 if feature.is_visual else 1):  # LeRobot's stats of [..., N] features are [N]
            value_type = pa.list_(value_type)
        for stat in STAT_KEYS:
            fields.append(pa.field(f"stats/{key}/{stat}", pa.list_(pa.int64()) if stat == "count" else value_type))
    fields += [
        pa.field("meta/episodes/chunk_index", pa.int64()),
        pa.field("meta/episodes/file_index", pa.int64()),
    ]
    schema = pa.schema(fields)
    columns = {f.name: [_jsonable(row.get(f.name)) for row in rows] for f in fields}
    return pa.table(columns, schema=schema)


def _jsonable(value: Any) -> Any:
    """Numpy arrays to nested lists, for pyarrow."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def episode_stats_columns(stats: dict[str, Stats]) -> dict[str, Any]:
    """Flatten one episode's statistics into ``stats/<feature>/<stat>`` columns."""
    return {f"stats/{k}/{s}": v.tolist() for k, st in stats.items() for s, v in st.items()}


def episode_stats_from_row(row: dict[str, Any], features: dict[str, Feature] | None = None) -> dict[str, Stats]:
    """Rebuild one episode's statistics from its ``stats/<feature>/<stat>`` columns.

    With ``features``, statistics of 2-5 dim features stored per element are reduced to LeRobot's layout
    (:func:`~robot_rl.data.lerobot.stats.conform`).
    """
    nested: dict[str, dict[str, list]] = {}
    for column, value in row.items():
        if column.startswith("stats/") and value is not None:
            key, stat = column[len("stats/") :].rsplit("/", 1)
            nested.setdefault(key, {})[stat] = value
    stats = stats_from_json(nested)
    if features:
        stats = {k: conform(v, features[k].shape) if k in features and not features[k].is_visual else v
                 for k, v in stats.items()}
    return stats


def check_stats(stats: dict[str, Stats], features: dict[str, Feature], source: Path) -> dict[str, Stats]:
    """Refuse statistics of a declared feature with a wrong shape or a non-finite number; returns them in
    LeRobot's layout (per-element statistics of 2-5 dim features reduced, see ``stats.conform``)."""
    fix = "rebuild it with `robot-rl dataset stats <dataset> --rewrite`"
    out = dict(stats)
    for key, feature_stats in stats.items():
        feature = features.get(key)
        if feature is None or feature.dtype == "string":
            continue
        allowed = stats_shapes(feature.shape, feature.is_visual)
        for name, value in feature_stats.items():
            want = ((1,),) if name == "count" else allowed
            if value.shape not in want:
                raise DatasetFormatError(f"has shape {list(value.shape)}, but feature {key!r} of shape "
                                         f"{list(feature.shape)} needs {' or '.join(str(list(w)) for w in want)}",
                                         file=source, key=f"{key}.{name}", fix=fix)
            if not np.isfinite(value).all():
                bad = value.reshape(-1)[~np.isfinite(value.reshape(-1))][0]
                raise DatasetFormatError("must be finite", file=source, key=f"{key}.{name}", value=float(bad), fix=fix)
            if name in ("std", "count") and (value < 0).any():
                raise DatasetFormatError("must be >= 0", file=source, key=f"{key}.{name}", value=value.tolist(),
                                         fix=fix)
        if not feature.is_visual:
            out[key] = conform(feature_stats, feature.shape)
    return out


def load_episodes(root: Path) -> list[dict[str, Any]]:
    """Every episode row of ``meta/episodes/*/*.parquet``, ordered by episode_index."""
    folder = root / "meta" / "episodes"
    files = sorted(folder.glob("*/*.parquet"))  # LeRobot's own pattern
    if not files:
        raise DatasetFormatError(f"no episode metadata under {folder} (expected chunk-000/file-000.parquet)")
    rows: list[dict[str, Any]] = []
    for path in files:
        table = read_parquet(path)
        missing = [c for c in EPISODE_COLUMNS if c not in table.column_names]
        if missing:
            raise DatasetFormatError(f"{path} lacks the episode columns {missing}; restore it from a copy, or, if "
                                     "robot_rl wrote the dataset, re-record it")
        rows += table.to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def save_stats(root: Path, stats: dict[str, Stats]) -> None:
    """Write ``meta/stats.json`` atomically."""
    write_json_atomic(root / STATS_PATH, stats_to_json(stats))


def load_stats(root: Path) -> dict[str, Stats]:
    """Read ``meta/stats.json`` (empty dict when the file is absent, as for a dataset with no episodes)."""
    path = root / STATS_PATH
    if not path.is_file():
        return {}
    try:
        return stats_from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, ValueError) as err:
        raise DatasetFormatError(
            f"{path} is not valid stats JSON ({err}); rebuild it with `robot-rl dataset stats <dataset> --rewrite`"
        ) from err
