"""Read LeRobot v3.0 datasets (ours or LeRobot's) with pyarrow and PyAV, no LeRobot install needed.

``LeRobotDataset(root)`` loads the metadata and all data parquet files, checks the structure
(:mod:`robot_rl.data.lerobot.validate`) and serves frames:

- ``ds[i]`` -> one frame as LeRobot returns it, in numpy: numeric features ``[*shape]`` (shape
  ``(1,)`` features and default columns as 0-d arrays), cameras float32 ``[3, H, W]`` in [0, 1],
  ``"task"`` the task string; with ``delta_timestamps`` each windowed key gets a leading
  ``[W]`` dim plus ``<key>_is_pad`` bool ``[W]``.
- ``ds.episode(e)`` -> every non-camera column of episode ``e`` as ``[T, *shape]`` arrays.
- ``ds.episode_frames(e, key)`` -> uint8 ``[T, H, W, 3]`` camera frames of episode ``e``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image

from robot_rl.data.lerobot import meta, validate
from robot_rl.data.lerobot.errors import DatasetFormatError
from robot_rl.data.lerobot.features import Feature, column_to_numpy, data_schema
from robot_rl.data.lerobot.stats import Stats
from robot_rl.data.lerobot.video import DEFAULT_TOLERANCE_S, decode_frames
from robot_rl.data.lerobot.windows import delta_indices, window


class LeRobotDataset:
    """A LeRobot v3.0 dataset on local disk (see the module docstring)."""

    def __init__(
        self,
        root: str | Path,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
    ) -> None:
        """Load and check the dataset at ``root``."""
        self.root = Path(root)
        self.tolerance_s = tolerance_s
        self.info, self.tasks = meta.load_description(self.root)
        self.episodes: list[dict[str, Any]] = meta.load_episodes(self.root) if self.info.total_episodes else []
        stats = meta.load_stats(self.root)
        self._table = self._load_data()
        self._cache: dict[str, np.ndarray] = {}
        validate.check_episodes(self.info, self.episodes, len(self.tasks))
        defaults = {k: self.column(k) for k in ("index", "episode_index", "frame_index", "timestamp", "task_index")}
        validate.check_frames(self.info, self.episodes, defaults, len(self.tasks), tolerance_s)
        validate.check_video_files(self.root, self.info, self.episodes)
        self.stats: dict[str, Stats] = meta.check_stats(stats, self.info.features, self.root / meta.STATS_PATH)
        unknown = sorted(set(delta_timestamps or {}) - set(self.info.features))
        if unknown:
            raise ValueError(
                f"delta_timestamps keys {unknown} are not features of {self.root}; "
                f"features: {sorted(self.info.features)}"
            )
        self.delta_indices = delta_indices(delta_timestamps or {}, self.fps, tolerance_s)

    def _load_data(self) -> pa.Table:
        """All ``data/`` parquet files, concatenated in path order."""
        files = sorted((self.root / "data").glob("*/*.parquet"))  # LeRobot's own pattern
        if not files and self.info.total_frames:
            raise DatasetFormatError(
                f"{self.root / 'data'} holds no chunk-*/file-*.parquet files but "
                f"meta/info.json counts {self.info.total_frames} frames"
            )
        tables = []
        for path in files:
            table = meta.read_parquet(path)
            validate.check_columns(self.info, table.schema, str(path))
            tables.append(table.select([k for k, f in self.info.features.items() if f.dtype != "video"]))
        if not tables:
            return data_schema(self.info.features).empty_table()
        return pa.concat_tables(tables, promote_options="permissive")

    # ----------------------------------------------------------------- metadata
    @property
    def fps(self) -> int:
        """Frames per second."""
        return self.info.fps

    @property
    def features(self) -> dict[str, Feature]:
        """Features by name, in info.json order."""
        return self.info.features

    @property
    def num_episodes(self) -> int:
        """Number of episodes."""
        return self.info.total_episodes

    @property
    def num_frames(self) -> int:
        """Number of frames over all episodes."""
        return self.info.total_frames

    @property
    def camera_keys(self) -> list[str]:
        """Image and video features."""
        return [k for k, f in self.info.features.items() if f.is_visual]

    def __len__(self) -> int:
        """Number of frames."""
        return self.num_frames

    def episode_range(self, episode: int) -> tuple[int, int]:
        """Global ``[from, to)`` row range of ``episode``."""
        if not 0 <= episode < self.num_episodes:
            raise IndexError(f"episode {episode} out of range; {self.root} has {self.num_episodes} episodes")
        row = self.episodes[episode]
        return row["dataset_from_index"], row["dataset_to_index"]

    def episode_task(self, episode: int) -> str:
        """Task of the first frame of ``episode``."""
        start, _ = self.episode_range(episode)
        return self.tasks[int(self.column("task_index")[start])]

    # ----------------------------------------------------------------- data access
    def column(self, key: str) -> np.ndarray:
        """A whole non-video column ``[num_frames, *shape]`` (shape-(1,) features: ``[num_frames]``)."""
        if key not in self._cache:
            feature = self.info.features.get(key)
            if feature is None or feature.dtype == "video":
                raise KeyError(
                    f"{key!r} is not a parquet column of {self.root}; columns: "
                    f"{[k for k, f in self.features.items() if f.dtype != 'video']}"
                )
            values = column_to_numpy(self._table[key], feature)
            self._cache[key] = values.reshape(-1) if feature.shape == (1,) and values.ndim == 2 else values
        return self._cache[key]

    def require_finite(self, *keys: str) -> None:
        """Refuse numeric columns holding NaN or inf, naming the data file, column, row, episode and frame.

        Call it before learning from (or simulating) the values: the structural checks do not read them.
        """
        for key in keys:
            values = self.column(key)
            if not np.issubdtype(values.dtype, np.floating):
                continue
            finite = np.isfinite(values.reshape(len(values), -1)).all(axis=1)
            if finite.all():
                continue
            row = int(np.flatnonzero(~finite)[0])
            ep = self.episodes[int(self.column("episode_index")[row])]
            path = self.root / self.info.data_path.format(
                chunk_index=ep["data/chunk_index"], file_index=ep["data/file_index"]
            )
            bad = values.reshape(len(values), -1)[row]
            raise DatasetFormatError(
                f"{int((~finite).sum())} rows hold NaN or inf, the first at row {row} (episode "
                f"{ep['episode_index']}, frame {row - ep['dataset_from_index']}): {bad[~np.isfinite(bad)][0]}",
                file=path, key=key, fix="re-record those episodes or restore the file from a copy",
            )

    def episode(self, episode: int) -> dict[str, np.ndarray]:
        """Every non-camera column of ``episode`` ``{key: [T, *shape]}``."""
        start, stop = self.episode_range(episode)
        return {k: self.column(k)[start:stop] for k, f in self.features.items() if not f.is_visual}

    def episode_frames(self, episode: int, key: str) -> np.ndarray:
        """Camera frames of ``episode``: uint8 ``[T, H, W, 3]``."""
        start, stop = self.episode_range(episode)
        return self._frames(key, np.arange(start, stop))

    def _frames(self, key: str, rows: np.ndarray) -> np.ndarray:
        """uint8 ``[len(rows), H, W, 3]`` frames of camera ``key`` at global ``rows`` (one episode)."""
        feature = self.features[key]
        if feature.dtype == "image":
            data = self.column(key)
            return np.stack([np.asarray(Image.open(io.BytesIO(data[r])).convert("RGB")) for r in rows])
        if feature.dtype != "video":
            raise KeyError(f"{key!r} is not a camera of {self.root}; cameras: {self.camera_keys}")
        episode = int(self.column("episode_index")[rows[0]])
        row = self.episodes[episode]
        assert self.info.video_path is not None
        path = self.root / self.info.video_path.format(
            video_key=key,
            chunk_index=row[f"videos/{key}/chunk_index"],
            file_index=row[f"videos/{key}/file_index"],
        )
        times = row[f"videos/{key}/from_timestamp"] + self.column("timestamp")[rows].astype(np.float64)
        return decode_frames(path, times, self.tolerance_s)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """One frame as LeRobot serves it (see the module docstring)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"frame {index} out of range; {self.root} has {len(self)} frames")
        index %= len(self)
        episode = int(self.column("episode_index")[index])
        ep_from, ep_to = self.episode_range(episode)
        item: dict[str, Any] = {}
        for key, feature in self.features.items():
            rows, is_pad = np.array([index]), None
            if key in self.delta_indices:
                rows, is_pad = window(index, ep_from, ep_to, self.delta_indices[key])
            if feature.is_visual:
                value = self._frames(key, rows).transpose(0, 3, 1, 2).astype(np.float32) / 255.0
            else:
                value = self.column(key)[rows]
            item[key] = value if is_pad is not None else value[0]
            if is_pad is not None:
                item[f"{key}_is_pad"] = is_pad
        item["task"] = self.tasks[int(self.column("task_index")[index])]
        return item
