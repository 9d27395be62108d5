"""Fuzz cases of kind ``dataset``: broken LeRobot datasets handed to ``robot-rl dataset``, ``bc``, ``replay``
and ``record --resume``. Each must exit 2 naming the file (and key), and a refused ``record --resume``
must leave every complete episode's files as they were.

Most cases corrupt a copy of the good 2-episode expert dataset (no camera); the mp4 cases corrupt a copy
of LeRobot's own ``so101_reach_tiny`` fixture (3 episodes in one AV1 file).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fuzz_harness import FuzzCase, GoodInputs
from lerobot_fixtures import REACH_TINY

INFO, STATS, TASKS = "meta/info.json", "meta/stats.json", "meta/tasks.parquet"
DATA, EPISODES = "data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.front/chunk-000/file-000.mp4"
BC_TINY = ["--epochs", "1", "--hidden-dims", "8", "--batch-size", "64", "--no-export"]
RECORD = ["record", "--task", "so101_reach", "--episodes", "3", "--num-envs", "1", "--override", "episode_s=0.5"]
KEEP = ("ds/data", "ds/meta/episodes")  # the complete episodes a refused resume must not touch


def _copy(case_dir: Path, source: Path) -> Path:
    dst = case_dir / "ds"
    shutil.copytree(source, dst)
    return dst


def _edit_json(rel: str, edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(ds: Path) -> None:
        doc = json.loads((ds / rel).read_text())
        edit(doc)
        (ds / rel).write_text(json.dumps(doc))  # json.dumps writes NaN/Infinity as Python's json reads them

    return apply


def _bytes(rel: str, cut: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def apply(ds: Path) -> None:
        (ds / rel).write_bytes(cut((ds / rel).read_bytes()))

    return apply


def _remove(rel: str) -> Callable[[Path], None]:
    def apply(ds: Path) -> None:
        target = ds / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return apply


def _edit_table(rel: str, edit: Callable[[pa.Table], pa.Table]) -> Callable[[Path], None]:
    def apply(ds: Path) -> None:
        pq.write_table(edit(pq.read_table(ds / rel)), ds / rel)

    return apply


def _poison(key: str, row: int, value: float) -> Callable[[pa.Table], pa.Table]:
    """Set element 0 of ``key`` at ``row`` to ``value`` (NaN, inf)."""

    def edit(table: pa.Table) -> pa.Table:
        rows = table[key].to_pylist()
        rows[row] = [value, *rows[row][1:]]
        return table.set_column(table.schema.get_field_index(key), key, pa.array(rows, table.schema.field(key).type))

    return edit


def _lengthen_episode(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index("length"), "length", pc.add(table["length"], 1))


def _drop_last_episode_row(table: pa.Table) -> pa.Table:
    return table.slice(0, table.num_rows - 1)


def _case(name: str, argv: list[str], corrupt: Callable[[Path], None], expect: tuple[str, ...],
          source: str = "good", protect: tuple[str, ...] = ()) -> FuzzCase:
    """A case that copies the good dataset (``source="fixture"``: LeRobot's) to ``ds``, corrupts it, runs
    ``argv`` with ``{ds}`` and ``{out}`` substituted."""

    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        ds = _copy(case_dir, good.dataset if source == "good" else REACH_TINY)
        for path in ds.rglob("*"):
            path.chmod(0o644 if path.is_file() else 0o755)  # the fixture files are read-only in some checkouts
        corrupt(ds)
        return [a.format(ds=ds, out=case_dir / "out") for a in argv]

    return FuzzCase(f"dataset/{name}", "dataset", make, expect, protect)


INFO_CMD, STATS_CMD = ["dataset", "info", "{ds}"], ["dataset", "stats", "{ds}"]
BC_CMD = ["bc", "{ds}", "--out", "{out}", *BC_TINY]
REPLAY_CMD = ["replay", "{ds}", "--episode", "0"]
RESUME_CMD = [*RECORD, "--out", "{ds}", "--resume"]


def cases() -> list[FuzzCase]:
    """Every dataset case (see the module docstring)."""
    nan, inf = math.nan, math.inf
    return [
        # meta/info.json
        _case("info.json=zero-byte", INFO_CMD, _bytes(INFO, lambda b: b""), ("info.json",)),
        _case("info.json=truncated", STATS_CMD, _bytes(INFO, lambda b: b[: len(b) // 2]), ("info.json",)),
        _case("info.json=garbage", INFO_CMD, _bytes(INFO, lambda b: b"\x89PNG\xff\xfe" * 50), ("info.json",)),
        _case("info.json={}", INFO_CMD, _edit_json(INFO, lambda d: d.clear()), ("info.json",)),
        _case("info.json.fps=missing", INFO_CMD, _edit_json(INFO, lambda d: d.pop("fps")), ("info.json", "fps")),
        _case("info.json.features=missing", INFO_CMD, _edit_json(INFO, lambda d: d.pop("features")),
              ("info.json", "features")),
        _case("info.json.fps=string", INFO_CMD, _edit_json(INFO, lambda d: d.update(fps="25")), ("info.json", "fps")),
        _case("info.json.fps=nan", BC_CMD, _edit_json(INFO, lambda d: d.update(fps=nan)), ("info.json", "fps")),
        _case("info.json.fps=-25", INFO_CMD, _edit_json(INFO, lambda d: d.update(fps=-25)), ("info.json", "fps")),
        _case("info.json.total_episodes=-1", INFO_CMD, _edit_json(INFO, lambda d: d.update(total_episodes=-1)),
              ("info.json", "total_episodes")),
        _case("info.json.total_frames=+1", STATS_CMD, _edit_json(INFO, lambda d: d.update(total_frames=d[
            "total_frames"] + 1)), ("info.json", "frames")),
        _case("info.json.features.action.shape=string", INFO_CMD,
              _edit_json(INFO, lambda d: d["features"]["action"].update(shape="six")), ("info.json", "action")),
        _case("info.json.features.action.dtype=complex64", INFO_CMD,
              _edit_json(INFO, lambda d: d["features"]["action"].update(dtype="complex64")), ("info.json", "action")),
        _case("info.json.codebase_version=v2.1", INFO_CMD,
              _edit_json(INFO, lambda d: d.update(codebase_version="v2.1")), ("info.json", "codebase_version")),
        _case("bc/info.json=zero-byte", BC_CMD, _bytes(INFO, lambda b: b""), ("info.json",)),
        _case("replay/info.json=truncated", REPLAY_CMD, _bytes(INFO, lambda b: b[:40]), ("info.json",)),
        # meta/stats.json
        _case("stats.json=zero-byte", STATS_CMD, _bytes(STATS, lambda b: b""), ("stats.json",)),
        _case("stats.json=garbage", INFO_CMD, _bytes(STATS, lambda b: b"\x00\xff" * 100), ("stats.json",)),
        _case("stats.json.observation.policy.mean=nan", BC_CMD,
              _edit_json(STATS, lambda d: d["observation.policy"]["mean"].__setitem__(0, nan)),
              ("stats.json", "observation.policy.mean")),
        _case("stats.json.observation.policy.std=negative", BC_CMD,
              _edit_json(STATS, lambda d: d["observation.policy"]["std"].__setitem__(2, -1.0)),
              ("stats.json", "observation.policy.std")),
        _case("stats.json.action.std=inf", STATS_CMD,
              _edit_json(STATS, lambda d: d["action"]["std"].__setitem__(1, inf)), ("stats.json", "action.std")),
        _case("stats.json.action.mean=wrong-shape", STATS_CMD,
              _edit_json(STATS, lambda d: d["action"].update(mean=[0.0, 1.0])), ("stats.json", "action.mean")),
        _case("stats.json.action.count=string", INFO_CMD,
              _edit_json(STATS, lambda d: d["action"].update(count=["many"])), ("stats.json",)),
        # data parquet
        _case("data.parquet=zero-byte", INFO_CMD, _bytes(DATA, lambda b: b""), ("file-000.parquet",)),
        _case("data.parquet=truncated", BC_CMD, _bytes(DATA, lambda b: b[: len(b) // 2]), ("file-000.parquet",)),
        _case("data.parquet=missing", INFO_CMD, _remove("data"), ("data",)),
        _case("data.parquet.action=dropped", INFO_CMD, _edit_table(DATA, lambda t: t.drop_columns(["action"])),
              ("file-000.parquet", "action")),
        _case("data.parquet.action.policy=nan", BC_CMD, _edit_table(DATA, _poison("action.policy", 7, nan)),
              ("file-000.parquet", "action.policy", "row 7")),
        _case("data.parquet.observation.policy=inf", BC_CMD,
              _edit_table(DATA, _poison("observation.policy", 15, inf)),
              ("file-000.parquet", "observation.policy", "row 15", "episode 1")),
        _case("replay/data.parquet.sim.qpos=nan", REPLAY_CMD, _edit_table(DATA, _poison("sim.qpos", 0, nan)),
              ("file-000.parquet", "sim.qpos", "row 0")),
        # episodes metadata and tasks
        _case("episodes.parquet=zero-byte", INFO_CMD, _bytes(EPISODES, lambda b: b""), ("episodes",)),
        _case("episodes.parquet.length=+1", INFO_CMD, _edit_table(EPISODES, _lengthen_episode), ("episode",)),
        _case("episodes.parquet=row-missing", STATS_CMD, _edit_table(EPISODES, _drop_last_episode_row),
              ("info.json", "episodes")),
        _case("episodes.parquet.length=dropped", INFO_CMD,
              _edit_table(EPISODES, lambda t: t.drop_columns(["length"])), ("file-000.parquet", "length")),
        _case("episodes.parquet.video-span=dropped", INFO_CMD,
              _edit_table(EPISODES, lambda t: t.drop_columns(["videos/observation.images.front/to_timestamp"])),
              ("meta/episodes", "to_timestamp"), "fixture"),
        _case("info.json.data_path=bad-template", BC_CMD,
              _edit_json(INFO, lambda d: d.update(data_path="data/{bogus}.parquet")), ("info.json", "data_path")),
        _case("tasks.parquet=missing", INFO_CMD, _remove(TASKS), ("tasks.parquet",)),
        _case("tasks.parquet=garbage", BC_CMD, _bytes(TASKS, lambda b: b"PAR1" + b"\x00" * 64), ("tasks.parquet",)),
        # video (LeRobot's own fixture, one AV1 file holding 3 episodes)
        _case("mp4=zero-byte", INFO_CMD, _bytes(VIDEO, lambda b: b""), ("file-000.mp4",), "fixture"),
        _case("mp4=truncated", INFO_CMD, _bytes(VIDEO, lambda b: b[: len(b) // 2]), ("file-000.mp4",), "fixture"),
        _case("mp4=garbage", STATS_CMD, _bytes(VIDEO, lambda b: bytes(range(256)) * 40), ("file-000.mp4",),
              "fixture"),
        _case("mp4=missing", INFO_CMD, _remove(VIDEO), ("file-000.mp4",), "fixture"),
        # record --resume refuses and keeps every complete episode
        _case("resume/info.json=zero-byte", RESUME_CMD, _bytes(INFO, lambda b: b""), ("info.json",), protect=KEEP),
        _case("resume/episodes-fewer-than-info.json", RESUME_CMD, _edit_table(EPISODES, _drop_last_episode_row),
              ("info.json", "episodes"), protect=KEEP),
        _case("resume/other-task", [*RESUME_CMD[:2], "so101_lift", *RESUME_CMD[3:]], lambda ds: None,
              ("info.json",), protect=KEEP),
        _case("record-over-existing-without-resume", [*RECORD, "--out", "{ds}"], lambda ds: None, ("--resume",),
              protect=("ds",)),
    ]
