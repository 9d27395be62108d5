"""Human-readable summaries and plots of a LeRobot dataset (used by ``robot-rl dataset``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.stats import QUANTILE_KEYS

_SHOWN_STATS = ("min", "max", "mean", "std", *QUANTILE_KEYS)


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned text table."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def dimension_names(ds: LeRobotDataset, key: str) -> list[str]:
    """One label per flattened dimension of ``key`` (feature names when given, else ``key[i]``)."""
    feature = ds.features[key]
    size = int(np.prod(feature.shape))
    names = feature.names
    if isinstance(names, dict):  # LeRobot v2 style {"motors": [...]}
        names = next(iter(names.values()), None)
    if isinstance(names, list) and len(names) == size and all(isinstance(n, str) for n in names):
        return names
    return [f"{key}[{i}]" for i in range(size)] if size > 1 else [key]


def describe(ds: LeRobotDataset, max_episodes: int = 20) -> str:
    """Dataset summary: totals, features, tasks and an episode table (first ``max_episodes`` rows)."""
    info = ds.info
    seconds = len(ds) / ds.fps
    parts = [
        f"dataset     {ds.root}",
        f"format      LeRobot {info.codebase_version}  robot_type={info.robot_type}  fps={ds.fps}",
        f"episodes    {ds.num_episodes}   frames {len(ds)}   duration {seconds:.1f} s   tasks {len(ds.tasks)}",
        "structure   OK (info.json schema, episode index ranges, frame/episode/task indices, timestamps vs fps, "
        "video files)",
        "",
        "features",
    ]
    feature_rows = []
    for key, feature in ds.features.items():
        names = feature.names if not feature.is_visual else None
        detail = ""
        if feature.dtype == "video" and feature.info:
            detail = f"{feature.info.get('video.codec')} {feature.info.get('video.pix_fmt')}"
        elif names:
            detail = ", ".join(dimension_names(ds, key))
            detail = detail if len(detail) <= 100 else detail[:97] + "..."
        feature_rows.append([key, feature.dtype, str(tuple(feature.shape)), detail])
    parts.append(_table(["key", "dtype", "shape", "names / codec"], feature_rows))
    parts += ["", "tasks", _table(["index", "task"], [[str(i), t] for i, t in enumerate(ds.tasks)]), "", "episodes"]
    episode_rows = []
    for row in ds.episodes[:max_episodes]:
        spans = [
            f"{row[f'videos/{k}/from_timestamp']:.2f}-{row[f'videos/{k}/to_timestamp']:.2f}s"
            for k in info.video_keys[:1]
        ]
        episode_rows.append(
            [
                str(row["episode_index"]),
                str(row["length"]),
                f"{row['length'] / ds.fps:.2f}",
                f"{row['dataset_from_index']}:{row['dataset_to_index']}",
                f"{row['data/chunk_index']:03d}/{row['data/file_index']:03d}",
                *spans,
                "; ".join(row["tasks"]),
            ]
        )
    header = [
        "episode",
        "frames",
        "seconds",
        "rows",
        "data file",
        *(["video span"] if info.video_keys else []),
        "tasks",
    ]
    parts.append(_table(header, episode_rows))
    if ds.num_episodes > max_episodes:
        parts.append(f"... {ds.num_episodes - max_episodes} more episodes (--max-episodes to show them)")
    return "\n".join(parts)


def stats_report(ds: LeRobotDataset, keys: list[str] | None = None) -> str:
    """``meta/stats.json`` as one table per feature, one row per dimension (cameras: per channel; 2-5 dim
    features: per index of their last axis, as LeRobot reduces them)."""
    chosen = keys or [k for k in ds.features if k in ds.stats]
    missing = [k for k in chosen if k not in ds.stats]
    if missing:
        raise KeyError(f"no statistics for {missing}; features with statistics: {sorted(ds.stats)}")
    parts = []
    for key in chosen:
        stats = ds.stats[key]
        labels = ["red", "green", "blue"] if ds.features[key].is_visual else dimension_names(ds, key)
        size = np.asarray(stats["mean"]).size
        if len(labels) != size:  # [..., N] feature: LeRobot's statistics are per last-axis index
            labels = [f"{key}[..., {i}]" for i in range(size)]
        rows = []
        for i, label in enumerate(labels):
            rows.append([label, *(f"{np.asarray(stats[s]).reshape(-1)[i]:.5g}" for s in _SHOWN_STATS if s in stats)])
        count = int(np.asarray(stats["count"]).reshape(-1)[0])
        unit = " (pixels in [0, 1])" if ds.features[key].is_visual else ""
        parts.append(f"{key}  count={count}{unit}\n" + _table(["dim", *[s for s in _SHOWN_STATS if s in stats]], rows))
    return "\n\n".join(parts)


def plot_features(
    ds: LeRobotDataset, out_dir: Path, keys: list[str] | None = None, episodes: list[int] | None = None
) -> list[Path]:
    """One PNG per numeric feature: a subplot per dimension (joint), a line per episode over time (s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes = list(range(min(ds.num_episodes, 10))) if episodes is None else episodes
    for ep in episodes:
        ds.episode_range(ep)  # raises a clear IndexError
    plottable = [
        k
        for k, f in ds.features.items()
        if not f.is_visual
        and f.dtype not in ("string", "bool")
        and k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
    ]
    chosen = keys or plottable
    bad = [k for k in chosen if k not in plottable]
    if bad:
        raise KeyError(f"cannot plot {bad}; numeric features: {plottable}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key in chosen:
        labels = dimension_names(ds, key)
        cols = min(3, len(labels))
        rows = int(np.ceil(len(labels) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 2.6 * rows), squeeze=False, sharex=True)
        for ep in episodes:
            data = ds.episode(ep)
            values = data[key].reshape(len(data["timestamp"]), -1)
            for i, ax in enumerate(axes.flat[: len(labels)]):
                ax.plot(data["timestamp"], values[:, i], lw=1.2, label=f"episode {ep}")
        for i, ax in enumerate(axes.flat):
            if i >= len(labels):
                ax.set_visible(False)
                continue
            ax.set_title(labels[i], fontsize=9)
            ax.grid(alpha=0.3)
            if i >= len(labels) - cols:
                ax.set_xlabel("time [s]")
        axes.flat[0].legend(fontsize=7, loc="best")
        fig.suptitle(f"{ds.root.name}: {key}")
        fig.tight_layout()
        path = out_dir / f"{key.replace('/', '_')}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written
