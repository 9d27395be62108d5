"""Open a finished (or interrupted) run directory."""

from __future__ import annotations

import sys
from pathlib import Path

from robot_rl.agents import BasePolicy, agent_class
from robot_rl.compose import load_schemas
from robot_rl.config.io import load_train_config
from robot_rl.config.schema import TrainConfig
from robot_rl.data.lerobot.meta import INFO_PATH
from robot_rl.train.runner import DATASET_DESCRIPTION_DIR, Runner


def open_run(run_dir: str | Path, num_envs: int = 1) -> Runner:
    """A runner on ``run_dir``'s saved config with its newest checkpoint loaded (``num_envs`` envs).

    Raises :class:`robot_rl.errors.InputError` naming the file for a missing or broken ``config.yaml``
    and :class:`robot_rl.checkpoint.CheckpointError` for a corrupt newest checkpoint (it does not
    fall back to an older one: evaluation and export must not silently use another step).
    """
    run_dir = Path(run_dir)
    load_schemas()
    cfg = load_train_config(run_dir / "config.yaml")
    _use_kept_dataset_description(cfg, run_dir)
    return Runner(cfg, run_dir, resume=True, num_envs=num_envs, strict=True)


def _use_kept_dataset_description(cfg: TrainConfig, run_dir: Path) -> None:
    """Point the agent's dataset (:attr:`robot_rl.agents.Agent.dataset_key`) at the description the run kept
    (``<run>/dataset_meta``) when the dataset is no longer where the run was trained from; says so on stderr."""
    key = agent_class(cfg.agent).dataset_key
    dataset = key and getattr(cfg.agent, key)
    kept = run_dir / DATASET_DESCRIPTION_DIR
    if not dataset or (Path(dataset) / INFO_PATH).is_file() or not (kept / INFO_PATH).is_file():
        return
    print(f"{run_dir}: its dataset {dataset} is gone; opening the run with the description it kept ({kept})",
          file=sys.stderr)
    setattr(cfg.agent, key, str(kept))


def load_base_policy(run_dir: str | Path | None) -> BasePolicy | None:
    """The policy of run ``run_dir`` for an agent that builds on it (:attr:`robot_rl.agents.Agent.base_policy_key`);
    None when no run is named (the agent then says what it needs).

    Raises :class:`robot_rl.errors.InputError` naming the file when the run has no readable ``config.yaml``.
    """
    if not run_dir:
        return None
    runner = open_run(run_dir)
    try:
        _, execution = runner.agent.policy_chunking()
        return BasePolicy(runner.agent.policy(), execution, runner.agent.policy_inputs,
                          getattr(runner.agent, "demonstration_batches", None))
    finally:
        runner.env.close()
