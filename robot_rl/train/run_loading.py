"""Open a finished (or interrupted) run directory."""

from __future__ import annotations

from pathlib import Path

from robot_rl.compose import load_schemas
from robot_rl.config.io import load_train_config
from robot_rl.train.runner import Runner


def open_run(run_dir: str | Path, num_envs: int = 1) -> Runner:
    """A runner on ``run_dir``'s saved config with its newest checkpoint loaded (``num_envs`` envs).

    Raises :class:`robot_rl.errors.InputError` naming the file for a missing or broken ``config.yaml``
    and :class:`robot_rl.checkpoint.CheckpointError` for a corrupt newest checkpoint (it does not
    fall back to an older one: evaluation and export must not silently use another step).
    """
    run_dir = Path(run_dir)
    load_schemas()
    cfg = load_train_config(run_dir / "config.yaml")
    return Runner(cfg, run_dir, resume=True, num_envs=num_envs, strict=True)
