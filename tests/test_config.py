"""Typed Hydra configs: composition, overrides, errors that name the key, save/load round trip."""

from pathlib import Path

import pytest
import yaml
from hydra.errors import ConfigCompositionException, MissingConfigException

from robot_rl.agents.ppo import PPOConfig
from robot_rl.compose import compose
from robot_rl.config import CONFIG_DIR, key_of, registered
from robot_rl.config.io import load_train_config, save_train_config
from robot_rl.critics.mlp import MLPCriticConfig
from robot_rl.errors import InputError


def _full_message(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def test_defaults_compose_to_typed_dataclasses():
    cfg = compose([])
    assert cfg.task.name == "so101_reach_deploy" and isinstance(cfg.agent, PPOConfig)
    assert isinstance(cfg.critic, MLPCriticConfig) and key_of("agent", cfg.agent) == "ppo"
    assert cfg.sim.device == "cpu" and cfg.logger.backends == ["tensorboard"]


def test_overrides_are_converted_to_the_field_type():
    cfg = compose(["agent.learning_rate=3e-4", "task.num_envs=8", "critic.hidden_dims=[32,32]", "logger=none"])
    assert cfg.agent.learning_rate == 3e-4 and cfg.task.num_envs == 8
    assert cfg.critic.hidden_dims == [32, 32] and cfg.logger.backends == []


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("agent.lrr=1", "agent.lrr"),
        ("agent.learning_rate=fast", "agent.learning_rate"),
        ("task.num_envs=1.5", "task.num_envs"),
        ("+critic.depth=3", "critic.depth"),
    ],
)
def test_typos_and_wrong_types_fail_naming_the_key(override, named):
    with pytest.raises((ConfigCompositionException, ValueError)) as err:
        compose([override])
    assert named in _full_message(err.value)


def test_unknown_option_lists_the_available_ones():
    with pytest.raises(MissingConfigException) as err:
        compose(["agent=ppoo"])
    assert "ppo" in str(err.value.options if hasattr(err.value, "options") else err.value)


def test_dataclass_validation_names_the_key():
    with pytest.raises(InputError) as err:  # the schema's __post_init__, through OmegaConf.to_object
        compose(["agent.schedule=cosine"])
    assert "agent.schedule = 'cosine'" in _full_message(err.value) and "adaptive" in str(err.value)


@pytest.mark.parametrize("group", ["agent", "critic"])
def test_every_option_file_extends_a_registered_schema_and_keys_match(group):
    """``<group>=<key>`` for a registered key extends that key's own schema; other files are presets
    of a registered schema (``critic=redq`` = the ``ensemble`` schema with REDQ values)."""
    for key in registered(group):
        assert (CONFIG_DIR / group / f"{key}.yaml").is_file(), f"registered {group} {key!r} has no option file"
    for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
        defaults = yaml.safe_load(path.read_text())["defaults"]
        schemas = [d for d in defaults if isinstance(d, str) and d.startswith(f"/schema/{group}/")]
        assert len(schemas) == 1, f"{path} must extend exactly one /schema/{group}/<key>@_here_"
        key = schemas[0].removeprefix(f"/schema/{group}/").removesuffix("@_here_")
        assert key in registered(group), f"{path} extends unregistered {group} schema {key!r}"
        if path.stem in registered(group):
            assert key == path.stem, f"{path} must extend its own schema /schema/{group}/{path.stem}"


def test_saved_config_reloads_identically_and_is_validated(tmp_path: Path):
    cfg = compose(["agent.learning_rate=3e-4", "seed=3"])
    path = save_train_config(cfg, tmp_path / "config.yaml")
    assert load_train_config(path) == cfg
    data = yaml.safe_load(path.read_text())
    data["agent"]["num_mini_batches"] = "many"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception) as err:
        load_train_config(path)
    assert "num_mini_batches" in _full_message(err.value)


def test_config_package_imports_no_agent_or_critic():
    """Schemas flow into robot_rl.config by registration; importing it pulls in neither agents nor critics."""
    import subprocess
    import sys

    code = ("import sys, robot_rl.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('robot_rl.agents', 'robot_rl.critics'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_task_option_file_composes_and_names_a_registered_task():
    """``task=<file>`` for each file under configs/task: it composes and names a task ``sim.make_env`` knows (file
    name = task name), so a command in the docs like ``robot-rl train task=g1_walk`` resolves."""
    import sim  # the task registry; imports MuJoCo

    paths = sorted((CONFIG_DIR / "task").glob("*.yaml"))
    assert {"g1_stand", "g1_walk", "so101_reach"} <= {p.stem for p in paths}
    for path in paths:
        cfg = compose([f"task={path.stem}"])
        assert cfg.task.name == path.stem, path
        if path.stem.startswith("Isaac-"):  # Isaac Lab's own tasks: sim.backend=isaaclab resolves them
            continue
        assert cfg.task.name in sim.list_tasks(), f"{path}: task {cfg.task.name!r} is not registered"
