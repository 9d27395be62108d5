"""Checkpoint integrity: checksums, resume falling back past a corrupt checkpoint, pruning that keeps the
last intact one, divergence stopping training without saving NaN, and run settings refused up front."""

import math

import pytest
import torch
from test_checkpoint import OVERRIDES, toy_factory

from robot_rl.checkpoint import (
    SUMS_FILE,
    TENSORS_FILE,
    CheckpointError,
    NonFiniteStateError,
    list_checkpoints,
    load_checkpoint,
    newest_intact,
    prune,
    save_checkpoint,
)
from robot_rl.compose import compose
from robot_rl.errors import InputError
from robot_rl.train.runner import Runner, TrainingDivergedError


def _corrupt(ckpt, name=TENSORS_FILE):
    data = bytearray((ckpt / name).read_bytes())
    data[len(data) // 3: len(data) // 3 + 64] = bytes(64)
    (ckpt / name).write_bytes(bytes(data))


def _train(run, total_steps):
    """Train the toy task from scratch into ``run`` (a checkpoint every 2 updates of 128 env steps)."""
    cfg = compose([*OVERRIDES, f"task.total_steps={total_steps}"])
    Runner(cfg, run, env_factory=toy_factory).learn(evaluate_and_export=False)


def test_checksums_are_written_last_and_catch_any_change(tmp_path):
    path = save_checkpoint(tmp_path, 10, {"w": torch.arange(4.0), "lr": 1e-3})
    assert sorted(p.name for p in path.iterdir()) == sorted([SUMS_FILE, TENSORS_FILE, "state.yaml"])
    assert load_checkpoint(path)[0] == 10
    _corrupt(path)
    with pytest.raises(CheckpointError, match=r"state\.safetensors: checksum mismatch"):
        load_checkpoint(path)


def test_non_finite_state_is_never_saved(tmp_path):
    for state in ({"w": torch.tensor([1.0, float("nan")])}, {"w": torch.ones(2), "lr": math.inf}):
        with pytest.raises(NonFiniteStateError, match="non-finite"):
            save_checkpoint(tmp_path, 1, state)
    assert list_checkpoints(tmp_path) == [] and not list((tmp_path / "checkpoints").iterdir())


def test_pruning_never_deletes_the_last_intact_checkpoint(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, {"w": torch.ones(2)}, keep=5)
    first, second, third = list_checkpoints(tmp_path)
    _corrupt(second)  # e.g. a disk that went bad after step 10
    _corrupt(third)
    assert prune(tmp_path, keep=1) == [second]  # the newest (kept anyway) and the last intact one stay
    assert list_checkpoints(tmp_path) == [first, third]
    save_checkpoint(tmp_path, 40, {"w": torch.ones(2)}, keep=2)  # intact again: the old ones may go
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000000000030", "step_000000000040"]


def test_resume_falls_back_to_the_newest_intact_checkpoint_and_says_so(tmp_path, capfd):
    run = tmp_path / "run"
    _train(run, 4 * 128)  # checkpoints at updates 2 and 4 (128 env steps per update)
    good, bad = list_checkpoints(run)
    good_bytes = {p.name: p.read_bytes() for p in good.iterdir()}
    _corrupt(bad)
    runner = Runner(compose([*OVERRIDES, "task.total_steps=768"]), run, env_factory=toy_factory,
                            resume=True)
    err = capfd.readouterr().err
    assert runner.env_steps == 256 and runner.updates == 2
    assert f"checkpoint {bad.name} is unusable" in err and f"corrupt_{bad.name}" in err
    assert f"resuming from the newest intact checkpoint {good.name}" in err
    assert {p.name: p.read_bytes() for p in good.iterdir()} == good_bytes  # loses nothing
    assert (run / "checkpoints" / f"corrupt_{bad.name}").is_dir()
    result = runner.learn(evaluate_and_export=False)
    assert result.env_steps == 768 and newest_intact(list_checkpoints(run)).name == "step_000000000768"


def test_strict_open_refuses_a_corrupt_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    _train(run, 4 * 128)
    good, bad = list_checkpoints(run)
    _corrupt(bad, "state.yaml")
    expected = rf"{bad.name}/state\.yaml: checksum mismatch.*intact one is .*{good.name}"
    with pytest.raises(CheckpointError, match=expected):
        Runner(compose(OVERRIDES), run, env_factory=toy_factory, resume=True, strict=True)


@pytest.mark.parametrize("interval", [1, 1000])  # caught by the weights check at the save / by the losses
def test_nan_learning_rate_stops_training_without_a_nan_checkpoint(tmp_path, interval):
    run = tmp_path / "run"
    cfg = compose([*OVERRIDES, "task.total_steps=1280", f"checkpoint_interval={interval}"])
    cfg.agent.schedule = "fixed"
    runner = Runner(cfg, run, env_factory=toy_factory)
    for group in runner.agent.optimizer.param_groups:  # past the config check (and torch's), as a bug would be
        group["lr"] = float("nan")
    with pytest.raises(TrainingDivergedError, match=r"training diverged at update \d+ .*non-finite"):
        runner.learn(evaluate_and_export=False)
    for ckpt in list_checkpoints(run):
        load_checkpoint(ckpt)  # every checkpoint that exists is finite (none, here)
    assert runner.updates < 10


@pytest.mark.parametrize("override, key", [
    ("checkpoint_interval=0", "checkpoint_interval"), ("agent.learning_rate=inf", "agent.learning_rate"),
    ("agent.entropy_coef=-1", "agent.entropy_coef"), ("seed=-1", "seed"),
])
def test_run_settings_are_refused_when_the_config_is_read(override, key):
    with pytest.raises(InputError, match=rf"^{key} = "):
        compose([*OVERRIDES, override])


def test_schema_1_checkpoints_without_checksums_still_load_and_are_checked(tmp_path):
    path = save_checkpoint(tmp_path, 10, {"w": torch.arange(3.0)})
    (path / SUMS_FILE).unlink()
    tree = path / "state.yaml"
    tree.write_text(tree.read_text().replace("schema_version: 2", "schema_version: 1"))
    step, state = load_checkpoint(path)
    assert step == 10 and torch.equal(state["w"], torch.arange(3.0))
    (path / TENSORS_FILE).write_bytes((path / TENSORS_FILE).read_bytes()[:40])
    with pytest.raises(CheckpointError, match=r"state\.safetensors: not a readable safetensors file"):
        load_checkpoint(path)


def test_resume_removes_temporary_directories_a_kill_left_behind(tmp_path):
    run = tmp_path / "run"
    _train(run, 2 * 128)
    (run / "checkpoints" / ".tmp_killed").mkdir()
    Runner(compose([*OVERRIDES, "task.total_steps=512"]), run, env_factory=toy_factory, resume=True)
    assert not (run / "checkpoints" / ".tmp_killed").exists()
