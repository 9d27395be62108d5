"""Open a finished (or interrupted) run directory."""

from __future__ import annotations

from pathlib import Path

from robot_rl.agents import BasePolicy
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
        return BasePolicy(runner.agent.policy(), execution, runner.agent.policy_inputs)
    finally:
        runner.env.close()
