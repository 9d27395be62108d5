"""Open a finished (or interrupted) run directory: its config, env and latest checkpoint."""

from __future__ import annotations

from pathlib import Path

from robot_rl.config import load_schemas
from robot_rl.config.io import load_train_config
from robot_rl.train.on_policy_runner import OnPolicyRunner


def open_run(run_dir: str | Path, num_envs: int = 1) -> OnPolicyRunner:
    """A runner on ``run_dir``'s saved config with its latest checkpoint loaded (``num_envs`` envs)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a run directory (no config.yaml); pass outputs/<date>/<time>"
        )
    load_schemas()
    cfg = load_train_config(run_dir / "config.yaml")
    return OnPolicyRunner(cfg, run_dir, resume=True, num_envs=num_envs)
