"""Schemas of the groups every run has (task, sim, logger) and of the run itself (``TrainConfig``).

Agent and critic schemas live next to their code and register themselves
(:func:`robot_rl.config.registry.register_config`); the values live in ``configs/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, is_dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from robot_rl.config.checks import check, fail, non_finite_fields
from robot_rl.config.registry import key_of, register_config
from robot_rl.errors import InputError

POSITIVE_ENV_KEYS = ("episode_s", "physics_dt", "policy_hz", "decimation", "max_episode_steps", "max_step_change")
"""``task.env`` settings (at any depth, e.g. ``task.env.control.physics_dt``) that must be > 0."""
EXPORT_FORMATS = ("onnx", "torchscript")
"""What ``export_formats`` may list (``robot_rl.export.FORMATS``, not imported here: it loads the exporters)."""
LOGGER_BACKENDS = ("tensorboard", "wandb")
SIM_BACKENDS = ("mujoco_batch", "mujoco_warp", "isaaclab")
"""``sim.registry.BACKENDS`` (not imported here: the config schema does not import sim)."""
SEED_MAX = 2**31 - 1 - 20_000
"""Largest seed: env, evaluation (``seed + 10_000``) and reset seeds stay within a signed 32-bit int."""


@dataclass
class TaskConfig:
    """Which environment to train on and for how long.

    Attributes:
        name: a ``sim.list_tasks()`` name (``so101_reach``).
        num_envs: parallel environments ``N``.
        total_steps: training budget in environment steps (summed over envs).
        env: extra keyword overrides passed to ``sim.make_env`` (task-specific).
    """

    name: str = MISSING
    num_envs: int = 64
    total_steps: int = 1_000_000
    env: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise fail(self, "task", "name", "must name a task", "a task of `robot-rl sim list` (e.g. so101_reach)")
        check(self, "task", at_least_1=("num_envs", "total_steps"))
        _check_env(self.env, "task.env")


def _check_env(node: Any, key: str) -> None:
    """Numbers of the ``task.env`` overrides must be finite; timing ones (:data:`POSITIVE_ENV_KEYS`) > 0."""
    if isinstance(node, dict):
        for k, v in node.items():
            _check_env(v, f"{key}.{k}")
        return
    if isinstance(node, list | tuple):
        for i, v in enumerate(node):
            _check_env(v, f"{key}[{i}]")
        return
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(node, float) and not math.isfinite(node):
        raise InputError("must be a finite number", key=key, value=node,
                         fix=f"give {key} a finite value, or drop the override to keep the task's default")
    if leaf in POSITIVE_ENV_KEYS and (isinstance(node, bool) or not isinstance(node, int | float) or node <= 0):
        raise InputError("must be a number > 0", key=key, value=node,
                         fix=f"give {key} a positive value (seconds, Hz or steps), or drop the override to keep "
                         "the task's default")


@dataclass
class SimConfig:
    """Where the simulation runs.

    Attributes:
        device: torch device of the env tensors and the networks (``cpu``, ``cuda``).
        num_threads: torch intra-op threads for the networks (0 = torch's default).
        backend: ``mujoco_batch`` (MuJoCo's CPU batch: our tasks and ``gym:<id>``), ``mujoco_warp`` (MuJoCo
            Warp, the ``[gpu]`` extra; ``sim.device=cuda`` for a GPU; docs/gpu.md) or ``isaaclab`` (``task.name``
            is an Isaac Lab task id; docs/isaaclab.md).
    """

    device: str = "cpu"
    num_threads: int = 0
    backend: str = "mujoco_batch"

    def __post_init__(self) -> None:
        check(self, "sim", at_least_0=("num_threads",), choices={"backend": SIM_BACKENDS})
        if not (self.device == "cpu" or self.device.split(":")[0] in ("cuda", "mps")):
            raise fail(self, "sim", "device", "is not a torch device", "cpu, cuda or cuda:<index> (or sim=cuda)")


@dataclass
class LoggerConfig:
    """Where training metrics go.

    Attributes:
        backends: any of ``tensorboard``, ``wandb`` (empty = console and progress bar only).
        wandb_project: W&B project name when ``wandb`` is a backend.
        progress: show the live progress bar (steps/s, return, success, ETA).
    """

    backends: list[str] = field(default_factory=lambda: ["tensorboard"])
    wandb_project: str = "robot_rl"
    progress: bool = True

    def __post_init__(self) -> None:
        unknown = [b for b in self.backends if b not in LOGGER_BACKENDS]
        if unknown:
            raise fail(self, "logger", "backends", f"has unknown {unknown}", f"a list of {list(LOGGER_BACKENDS)}")


@dataclass
class DistributedConfig:
    """Data-parallel training (``docs/distributed.md``).

    Attributes:
        nproc: processes on this machine; ``robot-rl train distributed.nproc=N`` (N > 1) re-launches itself
            through torchrun (``torch.distributed.run --standalone``). Each process runs ``task.num_envs`` envs,
            so the run steps ``N * task.num_envs`` envs; ``task.total_steps`` counts all of them. Under an
            outer ``torchrun`` (multi-node) the launcher's world size applies and this is not read.
    """

    nproc: int = 1

    def __post_init__(self) -> None:
        check(self, "distributed", at_least_1=("nproc",))


class AgentConfig:
    """What every agent's config declares to the train config's checks (PPO's and the off-policy template's
    configs subclass it): the critics it trains and the env steps it collects before its first update."""

    critics: ClassVar[tuple[str, ...]] = ()
    """The ``critic=`` options the agent can train (empty: any)."""

    def steps_before_update(self, num_envs: int) -> int:
        """Env steps (all envs) collected before the first update can happen (0: none)."""
        return 0


@dataclass
class TrainConfig:
    """One training run: the composed groups plus the runner's own settings.

    Attributes:
        task, agent, critic, sim, logger: the selected option of each config group.
        distributed: data-parallel settings (:class:`DistributedConfig`).
        seed: seeds the env, torch and the agent.
        resume: a run directory to continue from its last checkpoint (its config is reused).
        init_from: a run directory whose newest checkpoint's agent (networks, normalisers, optimiser; not a
            replay buffer) starts this new run, which keeps its own config and counts its steps from 0:
            fine-tune with new reward weights, limits or commands. Same observations and actions required.
        checkpoint_interval: agent updates between checkpoints (>= 1).
        eval_episodes: episodes of the final deterministic evaluation (0 = skip).
        export_formats: policy artifact formats written at the end (``onnx``, ``torchscript``).
        max_train_s: stop training after this many seconds of training wall time (a resumed run's earlier
            time included), then evaluate and export as at the end of the budget; 0 = no limit.

    ``__post_init__`` (run by ``OmegaConf.to_object``) refuses NaN/inf anywhere in the groups, a seed
    outside ``[0, SEED_MAX]``, a budget too small for one update, and an agent/critic pair the agent
    cannot train (its config class lists the critics it can: ``critics``).
    """

    task: Any = MISSING
    agent: Any = MISSING
    critic: Any = MISSING
    sim: Any = MISSING
    logger: Any = MISSING
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    seed: int = 0
    resume: str | None = None
    init_from: str | None = None
    checkpoint_interval: int = 25
    eval_episodes: int = 100
    export_formats: list[str] = field(default_factory=lambda: ["onnx", "torchscript"])
    max_train_s: float = 0.0

    def __post_init__(self) -> None:
        for group in ("task", "agent", "critic", "sim", "logger"):
            value = getattr(self, group)
            if is_dataclass(value):
                for key, bad in non_finite_fields(value, group):
                    raise InputError("must be a finite number", key=key, value=bad,
                                     fix=f"set {key} to a finite value (or drop the override for the default)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            raise fail(self, "", "seed", "is out of range", f"an integer in [0, {SEED_MAX}]")
        if self.resume and self.init_from:
            raise InputError("cannot be combined with resume= (resume continues a run with its own config; "
                             "init_from starts a new run from another run's weights)", key="init_from",
                             value=self.init_from, fix="drop one: resume=<run dir> continues that run, "
                             "init_from=<run dir> fine-tunes its weights under the new config")
        check(self, "", at_least_1=("checkpoint_interval",), at_least_0=("eval_episodes",),
              non_negative=("max_train_s",))
        unknown = [f for f in self.export_formats if f not in EXPORT_FORMATS]
        if unknown:
            raise fail(self, "", "export_formats", f"has unknown {unknown}",
                       f"a list of {list(EXPORT_FORMATS)} ([] for no export)")
        if is_dataclass(self.agent) and is_dataclass(self.task):
            self._check_pairing()
            self._check_budget()

    def _check_budget(self) -> None:
        """Refuse a ``task.total_steps`` smaller than what the agent collects before its first update."""
        if not isinstance(self.agent, AgentConfig):  # a bare test config: nothing declared to check
            return
        need = self.agent.steps_before_update(self.task.num_envs)
        if self.task.total_steps < need:
            raise InputError(
                f"is smaller than the {need:,} env steps collected before the first update (agent settings, "
                f"task.num_envs={self.task.num_envs}): the run would train nothing", key="task.total_steps",
                value=self.task.total_steps, fix=f"raise task.total_steps to >= {need}, or lower the agent's "
                "rollout length (agent.num_steps_per_env) / warm-up (agent.learning_starts) or task.num_envs")

    def _check_pairing(self) -> None:
        """Refuse ``critic=<key>`` unless the agent's config lists it in ``critics`` (empty = any)."""
        allowed = self.agent.critics if isinstance(self.agent, AgentConfig) else ()
        if not allowed or not is_dataclass(self.critic):
            return
        try:
            agent, critic = key_of("agent", self.agent), key_of("critic", self.critic)
        except KeyError:  # an unregistered (test) config class: nothing to compare against
            return
        if critic not in allowed:
            raise InputError(f"agent={agent} cannot train this critic; it trains critic={' | '.join(allowed)}",
                             key="critic", value=critic,
                             fix=f"pick one of critic={','.join(allowed)}, or leave critic= out for agent={agent}'s "
                             f"default (configs/agent/{agent}.yaml)")


register_config("task", "base", TaskConfig)
register_config("sim", "base", SimConfig)
register_config("logger", "base", LoggerConfig)
register_config("distributed", "base", DistributedConfig)
register_config("train", "base", TrainConfig)
