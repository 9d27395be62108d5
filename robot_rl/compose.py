"""Compose a :class:`~robot_rl.config.TrainConfig` from the ``configs/`` tree: where the schemas meet their owners.

``robot_rl.config`` holds the schema registry and the typed configs and imports no agent or critic; agents
and critics store their schemas in it when their packages are imported (``@register_agent`` /
``@register_critic``). This module is the one place that imports both sides: :func:`load_schemas` before
Hydra composes (``robot-rl train``, opening a run directory) and :func:`compose` for code and tests that
build a config from overrides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from robot_rl.config import CONFIG_DIR, TrainConfig, to_train_config

if TYPE_CHECKING:
    from omegaconf import DictConfig


def load_schemas() -> None:
    """Import agents and critics so their ``register_*`` decorators store their schemas."""
    import robot_rl.agents
    import robot_rl.critics  # noqa: F401


def compose_dict(overrides: list[str] | None = None) -> DictConfig:
    """Hydra's ``DictConfig`` of ``configs/config.yaml`` with Hydra-style ``overrides`` (no run directory, no
    logging, no ``hydra`` node)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    load_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))


def compose(overrides: list[str] | None = None) -> TrainConfig:
    """Compose ``configs/config.yaml`` with Hydra-style ``overrides`` (no run directory, no logging)."""
    return to_train_config(compose_dict(overrides))
