"""Pick the runner an agent needs, and open a finished (or interrupted) run directory."""

from __future__ import annotations

import importlib
from pathlib import Path

from robot_rl.agents import agent_class
from robot_rl.compose import load_schemas
from robot_rl.config.io import load_train_config
from robot_rl.config.schema import TrainConfig
from robot_rl.train.on_policy_runner import OnPolicyRunner

RUNNERS = {
    "on_policy": "robot_rl.train.on_policy_runner:OnPolicyRunner",
    "off_policy": "robot_rl.train.off_policy_runner:OffPolicyRunner",
}


def runner_for(cfg: TrainConfig) -> type[OnPolicyRunner]:
    """The runner class named by the configured agent's ``runner`` attribute."""
    name = agent_class(cfg.agent).runner
    if name not in RUNNERS:
        raise KeyError(f"agent runner {name!r} is not one of {sorted(RUNNERS)}")
    module, _, cls = RUNNERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def open_run(run_dir: str | Path, num_envs: int = 1) -> OnPolicyRunner:
    """A runner on ``run_dir``'s saved config with its newest checkpoint loaded (``num_envs`` envs).

    Raises :class:`robot_rl.errors.InputError` naming the file for a missing or broken ``config.yaml``
    and :class:`robot_rl.train.checkpoint.CheckpointError` for a corrupt newest checkpoint (it does not
    fall back to an older one: evaluation and export must not silently use another step).
    """
    run_dir = Path(run_dir)
    load_schemas()
    cfg = load_train_config(run_dir / "config.yaml")
    return runner_for(cfg)(cfg, run_dir, resume=True, num_envs=num_envs, strict=True)
