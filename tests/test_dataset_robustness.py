"""Datasets as LeRobot 0.6.1 writes them and as crashes and bad values leave them.

- statistics of a ``[..., N]`` feature are ``[N]``, reduced over every axis but the last (LeRobot's
  ``RunningQuantileStats`` layout), on write and read; older per-element statistics are converted;
- behaviour cloning refuses NaN/inf in the columns it learns from, and never saves non-finite weights;
- ``record`` reuses a folder that holds only a killed recorder's temporary files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file, save_file

from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.bc import load_clone
from robot_rl.checkpoint import SUMS_FILE, TENSORS_FILE, TREE_FILE, latest_checkpoint
from robot_rl.cli import main
from robot_rl.commands.bc import fit, save_run
from robot_rl.compose import compose
from robot_rl.data.lerobot import DatasetFormatError, LeRobotDataset, LeRobotWriter
from robot_rl.data.lerobot.stats import QUANTILE_KEYS, feature_stats, vector_stats
from robot_rl.data.transitions import demo_transitions
from robot_rl.deploy.artifact import sha256_file
from robot_rl.errors import InputError

GRID = {"observation.grid": {"dtype": "float32", "shape": [2, 3], "names": None},
        "observation.policy": {"dtype": "float32", "shape": [4], "names": None},
        "action.policy": {"dtype": "float32", "shape": [2], "names": None}}
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"


def _write(root: Path, episodes: int = 3, frames: int = 10) -> dict[str, np.ndarray]:
    """A dataset of GRID features with seeded values; returns the columns written ``{key: [N, *shape]}``."""
    rng = np.random.default_rng(0)
    n = episodes * frames
    columns = {k: rng.normal(size=(n, *v["shape"])).astype(np.float32) for k, v in GRID.items()}
    columns["action.policy"] = np.tanh(columns["action.policy"])
    with LeRobotWriter.create(root, fps=10, features=GRID, durable=False) as writer:
        for e in range(episodes):
            for t in range(e * frames, (e + 1) * frames):
                writer.add_frame({k: v[t] for k, v in columns.items()}, task="t")
            writer.save_episode()
    return columns


def test_nd_feature_stats_are_reduced_over_all_but_the_last_axis() -> None:
    x = np.random.default_rng(1).normal(size=(20, 2, 3))
    stats = feature_stats(x)
    rows = vector_stats(x.reshape(-1, 3))  # LeRobot: RunningQuantileStats over batch.reshape(-1, last)
    assert {k: v.shape for k, v in stats.items()} == {**{k: (3,) for k in stats if k != "count"}, "count": (1,)}
    for key in ("min", "max", "mean", "std", *QUANTILE_KEYS):
        np.testing.assert_allclose(stats[key], rows[key], err_msg=key)
    np.testing.assert_allclose(stats["mean"], x.mean(axis=(0, 1)))
    assert stats["count"].tolist() == [20]  # frames, as LeRobot counts them, not 20 x 2 rows
    single = feature_stats(x[:1])
    assert single["q50"].shape == (3,)
    np.testing.assert_allclose(single["q50"], x[0].mean(axis=0))  # one frame: quantiles are the mean


def test_written_stats_follow_lerobot_and_dataset_stats_prints_them(tmp_path: Path, capsys) -> None:
    columns = _write(tmp_path / "ds")
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())["observation.grid"]
    np.testing.assert_allclose(stats["mean"], columns["observation.grid"].reshape(-1, 3).mean(0), rtol=1e-5)
    assert len(stats["q99"]) == 3 and stats["count"] == [30]
    schema = pq.read_schema(tmp_path / "ds" / EPISODES_FILE)
    assert schema.field("stats/observation.grid/mean").type == pa.list_(pa.float64())
    assert main(["dataset", "stats", str(tmp_path / "ds"), "--key", "observation.grid"]) == 0
    out = capsys.readouterr().out
    assert "observation.grid[..., 2]" in out and "observation.grid[..., 3]" not in out


def test_per_element_stats_of_older_datasets_are_read_and_resumed_in_lerobot_layout(tmp_path: Path, capsys) -> None:
    root = tmp_path / "ds"
    columns = _write(root)
    grid = columns["observation.grid"]
    old = {k: np.asarray(v) for k, v in feature_stats(grid.reshape(30, 6)).items()}  # per element, as before
    raw = json.loads((root / "meta/stats.json").read_text())
    raw["observation.grid"] = {k: (v if k == "count" else v.reshape(2, 3)).tolist() for k, v in old.items()}
    (root / "meta/stats.json").write_text(json.dumps(raw))
    table = pq.read_table(root / EPISODES_FILE)
    for stat in ("min", "max", "mean", "std", *QUANTILE_KEYS):
        per_episode = [feature_stats(grid[e * 10:(e + 1) * 10].reshape(10, 6))[stat].reshape(2, 3).tolist()
                       for e in range(3)]
        name = f"stats/observation.grid/{stat}"
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(per_episode))
    pq.write_table(table, root / EPISODES_FILE)

    ds = LeRobotDataset(root)  # the LeRobot crash: "index 3 is out of bounds" came from such shape mixes
    np.testing.assert_allclose(ds.stats["observation.grid"]["mean"], grid.reshape(-1, 3).mean(0), rtol=1e-5)
    np.testing.assert_allclose(ds.stats["observation.grid"]["std"], grid.reshape(-1, 3).std(0), rtol=1e-4)
    assert main(["dataset", "stats", str(root)]) == 0
    capsys.readouterr()
    with LeRobotWriter.resume(root, durable=False) as writer:
        for t in range(10):
            writer.add_frame({k: v[t] for k, v in columns.items()}, task="t")
        writer.save_episode()
    resumed = LeRobotDataset(root)
    assert resumed.num_episodes == 4 and resumed.stats["observation.grid"]["q50"].shape == (3,)
    both = np.concatenate([grid, grid[:10]]).reshape(-1, 3)
    np.testing.assert_allclose(resumed.stats["observation.grid"]["mean"], both.mean(0), rtol=1e-5)


DEMOS = {**{k: v for k, v in GRID.items() if k != "observation.grid"},
         "next.observation.policy": GRID["observation.policy"],
         "next.reward": {"dtype": "float32", "shape": [1], "names": None},
         "next.done": {"dtype": "bool", "shape": [1], "names": None},
         "next.terminated": {"dtype": "bool", "shape": [1], "names": None}}


def _write_demos(root: Path, episodes: int = 3, frames: int = 10) -> None:
    """A dataset of seeded transitions with the columns behaviour cloning reads (``robot-rl record``'s), no task."""
    rng = np.random.default_rng(0)
    with LeRobotWriter.create(root, fps=10, features=DEMOS, durable=False) as writer:
        for _ in range(episodes):
            for t in range(frames):
                frame = {k: rng.normal(size=v["shape"]).astype(np.float32) for k, v in DEMOS.items()
                         if v["dtype"] == "float32"}
                frame["action.policy"] = np.tanh(frame["action.policy"])
                writer.add_frame({**frame, "next.done": np.array([t == frames - 1]),
                                  "next.terminated": np.array([False])}, task="t")
            writer.save_episode()


def _put_nan_action(root: Path) -> None:
    """Row 13 (episode 1, frame 3) of ``action.policy`` becomes NaN, as a bad copy would (the writer refuses NaN)."""
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    actions = table["action.policy"].to_pylist()
    actions[13][1] = float("nan")
    column = table.schema.get_field_index("action.policy")
    pq.write_table(table.set_column(column, "action.policy", pa.array(actions, table.schema.field(column).type)), path)


def test_demo_transitions_refuse_nan_for_every_agent_learning_from_demos(tmp_path: Path) -> None:
    _write_demos(tmp_path / "ds")
    _put_nan_action(tmp_path / "ds")
    with pytest.raises(DatasetFormatError, match=r"row 13 \(episode 1, frame 3\)"):
        demo_transitions(tmp_path / "ds")


def test_bc_refuses_nan_actions_naming_file_column_row_and_episode(tmp_path: Path, capsys) -> None:
    _write_demos(tmp_path / "ds")
    _put_nan_action(tmp_path / "ds")
    argv = ["bc", str(tmp_path / "ds"), "--out", str(tmp_path / "out"), "--epochs", "1", "--hidden-dims", "8",
            "--no-export"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    for part in ("data/chunk-000/file-000.parquet", "action.policy", "row 13", "episode 1", "frame 3"):
        assert part in err, (part, err)
    assert not (tmp_path / "out").exists()


def test_bc_never_saves_or_loads_non_finite_weights(tmp_path: Path) -> None:
    _write_demos(tmp_path / "ds")
    cfg = compose(["agent=bc", f"agent.demos={tmp_path / 'ds'}", "agent.actor_hidden_dims=[8]", "agent.batch_size=16",
                   "task.name=none"])
    spec = EnvSpec(num_envs=1, observation_dims={"policy": 4}, action_dim=2, action_low=-torch.ones(2),
                   action_high=torch.ones(2))
    agent = make_agent(cfg.agent, cfg.critic, spec)
    result = fit(agent, epochs=2, patience=2)
    save_run(agent, cfg, tmp_path / "good", result, 0.0)
    with torch.no_grad():
        next(agent.actor.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(InputError, match=r"holds NaN or inf: training diverged; nothing was saved .*actor/net\.0"):
        save_run(agent, cfg, tmp_path / "diverged", result, 0.0)
    diverged = tmp_path / "diverged"
    assert not list(diverged.glob("checkpoints/step_*")) and not (diverged / "config.yaml").exists()
    ckpt = latest_checkpoint(tmp_path / "good")
    tensors = load_file(ckpt / TENSORS_FILE)
    tensors["agent/normalizers/policy.mean"][0] = float("inf")
    save_file(tensors, ckpt / TENSORS_FILE)  # with matching checksums, as a diverged writer would have left it
    (ckpt / SUMS_FILE).write_text("".join(f"{sha256_file(ckpt / n)}  {n}\n" for n in (TENSORS_FILE, TREE_FILE)))
    with pytest.raises(InputError, match=r"step_0+2: holds non-finite values .* agent/normalizers/policy\.mean"):
        load_clone(tmp_path / "good", 4, 2)


def test_record_reuses_a_folder_left_before_the_first_commit(tmp_path: Path) -> None:
    root = tmp_path / "demos"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / ".info.json.tmp-4242").write_text('{"codebase_ver')  # killed while writing info.json
    argv = ["record", "--task", "so101_reach", "--episodes", "1", "--num-envs", "1", "--override", "episode_s=0.2",
            "--out", str(root)]
    assert main(argv) == 0
    assert LeRobotDataset(root).num_episodes == 1
    assert not (root / "meta" / ".info.json.tmp-4242").exists()
