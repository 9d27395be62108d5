"""``robot-rl train``: train an agent from the Hydra config tree in ``configs/``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from robot_rl.config.schema import TrainConfig

SUMMARY = "Train an agent from Hydra configs (task=..., agent=..., -m sweeps, resume=<run dir>)"

HELP_HEADER = """robot-rl train: train an agent in batched simulation.

Usage:
  robot-rl train [KEY=VALUE ...]            one run, written to outputs/<date>/<time>/
  robot-rl train -m KEY=A,B [KEY=VALUE ...]  a sweep (one run per combination)
  robot-rl train resume=<run dir>           continue a run from its latest checkpoint
  robot-rl train init_from=<run dir> ...    a new run from that run's weights (fine-tune under new overrides)
  robot-rl train distributed.nproc=N        data parallel: N processes (torchrun), each task.num_envs envs

Examples:
  robot-rl train                                   # task=so101_reach_deploy agent=ppo (defaults: deployable as trained)
  robot-rl train task.num_envs=128 agent.learning_rate=3e-4
  robot-rl train recipe=reach_fast                 # so101_reach PPO tuned for time to 90% (docs/training.md)
  robot-rl train -m seed=0,1,2
  robot-rl train logger=wandb sim=cuda
  robot-rl train --cfg job                          # print the composed config and exit

Every key is typed (robot_rl/config): a typo, a wrong type or an out-of-range value fails naming the key.

Exit codes: 0 trained; 2 bad input (a config value, a run directory, a corrupt checkpoint) or training
that diverged (non-finite losses or weights: the last finite checkpoint is kept); 130 stopped by Ctrl-C, 143 by
SIGTERM (kill, a scheduler's preemption: the checkpoints are kept; it prints the resume command); 1 a bug.
"""


def config_groups(config_dir: Path) -> str:
    """``== Configuration groups ==`` and one ``group: option, ...`` line per folder of ``config_dir`` that holds
    yaml files (``hydra/launcher`` included; not the schemas the code registers, which no user picks)."""
    lines = ["== Configuration groups ==", "Compose your configuration from those groups (group=option)", ""]
    for folder in sorted({path.parent for path in config_dir.rglob("*.yaml")} - {config_dir}):
        options = sorted(path.stem for path in folder.glob("*.yaml"))
        lines.append(f"{folder.relative_to(config_dir).as_posix()}: {', '.join(options)}")
    return "\n".join(lines)


def help_text(argv: list[str]) -> str:
    """``robot-rl train --help``: :data:`HELP_HEADER`, :func:`config_groups` and the config composed from the other
    overrides in ``argv`` (``agent=sac --help`` shows SAC's keys). Hydra's own help lists the groups by deep-copying
    its config store once per group (~6 s here) and would list the internal schemas too.

    Raises:
        InputError: a bad override (as for training).
    """
    from omegaconf import OmegaConf

    from robot_rl.compose import compose_dict
    from robot_rl.config import CONFIG_DIR

    with _bad_overrides_refused():
        cfg = compose_dict(_app_overrides(argv))
    return (f"{HELP_HEADER}\n{config_groups(CONFIG_DIR)}\n\n== Config ==\n"
            f"Override anything in the config (foo.bar=value)\n\n{OmegaConf.to_yaml(cfg)}")


def _app_overrides(argv: list[str]) -> list[str]:
    """The overrides of ``argv`` that compose the app's config: not Hydra's own (``hydra.*``), not ``--help``."""
    return [a for a in argv if a not in ("-h", "--help") and not a.lstrip("+~").startswith("hydra.")]


@contextmanager
def _bad_overrides_refused() -> Iterator[None]:
    """Composing inside it: Hydra's and OmegaConf's errors (an unknown group option, a value of the wrong type, an
    unknown key) become an :class:`InputError` naming the overrides and the fix."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from robot_rl.errors import InputError

    try:
        yield
    except (HydraException, OmegaConfBaseException) as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        first = str(exc).strip().splitlines()
        raise InputError(f"{' '.join(first[:12])}{cause}", file="robot-rl train overrides",
                         fix="`robot-rl train --help` and `--cfg job` list the keys and options") from exc


def _run_dir(resume: str | None) -> str:
    """Hydra's run directory: the resumed run's, or outputs/<date>/<time>."""
    if resume:
        return str(Path(resume))
    return datetime.now().strftime("outputs/%Y-%m-%d/%H-%M-%S")


def _task(cfg: DictConfig) -> None:
    """Hydra's task function: train one run; bad input exits 2 with one line on stderr (no traceback)."""
    import signal
    import threading

    from robot_rl.errors import EXIT_BAD_INPUT, user_error_types

    # SIGTERM (kill, a scheduler's preemption or time limit) stops a run as Ctrl-C does. A run started in the
    # background by a non-interactive shell (nohup ... &) ignores SIGINT: there, SIGTERM is the way to stop it.
    if threading.current_thread() is threading.main_thread():  # (a launcher may run the task in a worker thread)
        signal.signal(signal.SIGTERM, _terminated)
    try:
        _train(cfg)
    except user_error_types() as exc:
        print(f"robot-rl train: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except Terminated:
        print(f"robot-rl train: {interrupted_message('SIGTERM')}", file=sys.stderr)
        raise SystemExit(EXIT_TERMINATED) from None
    except KeyboardInterrupt:
        print(f"robot-rl train: {interrupted_message('Ctrl-C')}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None


EXIT_INTERRUPTED = 130
"""Exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""
EXIT_TERMINATED = 143
"""Exit status of a run stopped by SIGTERM (128 + SIGTERM)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds like Ctrl-C (no checkpoint is half written: saves are atomic renames)."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def interrupted_message(by: str = "Ctrl-C") -> str:
    """What a user stopping a run (``by`` Ctrl-C or SIGTERM) needs: the newest checkpoint kept and the command that
    continues."""
    from hydra.core.hydra_config import HydraConfig

    from robot_rl.checkpoint import latest_checkpoint

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    newest = latest_checkpoint(run_dir)
    if newest is None:
        return f"interrupted ({by}) before the first checkpoint; nothing to resume in {run_dir}"
    return (f"interrupted ({by}); {run_dir} keeps its checkpoints (newest: {newest.name}); continue with "
            f"robot-rl train resume={run_dir}")


def _train(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from robot_rl import distributed
    from robot_rl.config import to_train_config
    from robot_rl.config.io import load_train_config
    from robot_rl.train.runner import Runner

    train_cfg = to_train_config(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    main = distributed.is_main()
    if train_cfg.resume:
        # (Hydra has made the run directory, the resumed one, by now: a missing config.yaml is what tells)
        train_cfg = load_train_config(Path(train_cfg.resume) / "config.yaml")
        train_cfg.resume = str(run_dir)
        if main:
            print(f"resuming {run_dir} (its saved config.yaml; other overrides are ignored)", file=sys.stderr)
    train_cfg.sim.device = distributed.init(train_cfg.sim.device)  # under torchrun: cuda -> cuda:<LOCAL_RANK>
    runner = Runner(train_cfg, run_dir, resume=bool(train_cfg.resume))
    if not main:
        runner.learn()
        return
    if distributed.active():
        print(f"data parallel: {distributed.world_size()} processes x {runner.env.num_envs} envs "
              f"({distributed.backend_for(train_cfg.sim.device)})", file=sys.stderr)
    print(f"run directory: {run_dir}", file=sys.stderr)
    result = runner.learn()
    unit = "gradient steps" if runner.agent.offline else "env steps"
    print(f"trained {result.env_steps:,} {unit} in {result.wall_s:.0f} s ({result.updates} updates)")
    if result.eval:
        e = result.eval
        line = f"eval over {e['episodes']} episodes: "
        if "success_rate" in e:  # a task without a success rule (g1_stand) reports return and survival only
            lo, hi = e["success_ci95"]
            line += f"success {100 * e['success_rate']:.1f}% [95% CI {100 * lo:.1f}-{100 * hi:.1f}], "
        print(f"{line}return {e['return_mean']:.2f}")
        if "survival_rate" in e:
            lo, hi = e["survival_ci95"]
            print(f"  survival (episodes ending by the time limit) {100 * e['survival_rate']:.1f}% "
                  f"[95% CI {100 * lo:.1f}-{100 * hi:.1f}]")
        if "commands_beyond_safety" in e:
            print(f"  commands the deploy safety layer would change (rate or joint limit): "
                  f"{100 * e['commands_beyond_safety']:.0f}% of steps")
        for target, t in e.get("success_by_target", {}).items():
            print(f"  {target}: success {100 * t['success_rate']:.1f}% over {t['episodes']} episodes")
    if result.artifact:
        print(f"policy artifact: {result.artifact}")


_HYDRA_FLAGS = ("-m", "--multirun", "-c", "--cfg", "-h", "--help", "--hydra-help", "--info", "-i", "-p", "--package")


def check_overrides(argv: list[str]) -> TrainConfig | None:
    """Compose the config once before Hydra starts a run, so that a bad override is refused (exit 2).

    Hydra itself would print a composition error and exit 1, and an unknown task would only fail once
    the run directory exists. Sweeps (``-m``) and Hydra's own flags are left to Hydra (``None``).
    Returns the run's config: the composed one, or the resumed run's ``config.yaml``.

    Raises:
        InputError: an unknown group option, a value of the wrong type, an unknown key or task.
    """
    import sim
    from robot_rl.checkpoint import list_checkpoints, newest_intact
    from robot_rl.compose import compose
    from robot_rl.config.io import load_train_config
    from robot_rl.errors import InputError
    from sim.errors import SimInputError

    if any(a in _HYDRA_FLAGS for a in argv):
        return None
    with _bad_overrides_refused():
        cfg = compose(_app_overrides(argv))
    if cfg.resume:  # before Hydra makes the run directory, which is the resumed one
        resumed = load_train_config(Path(cfg.resume) / "config.yaml")
        resumed.resume = cfg.resume
        cfg = resumed
    elif cfg.init_from and newest_intact(list_checkpoints(cfg.init_from)) is None:  # (a resumed run has its weights)
        raise InputError("has no intact checkpoint to start from", key="init_from", value=cfg.init_from,
                         fix="init_from=<a run directory robot-rl train wrote, with checkpoints/step_*>")
    name = cfg.task.name
    if cfg.sim.backend == "isaaclab":
        from sim.isaaclab_adapter import check_task

        try:
            check_task(name)
        except SimInputError as exc:
            raise InputError(str(exc), key="task.name", value=name) from None
    elif not name.startswith("gym:") and name not in sim.list_tasks():
        hint = " (an Isaac Lab id: add sim.backend=isaaclab)" if name.startswith("Isaac") else ""
        raise InputError("unknown task", key="task.name", value=name,
                         fix=f"use one of {', '.join(sim.list_tasks())}{hint}")
    return cfg


def launch(argv: list[str], nproc: int) -> int:
    """Re-run ``robot-rl train argv`` as ``nproc`` processes on this machine through torchrun
    (``python -m torch.distributed.run --standalone``); returns its exit code."""
    import subprocess

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "robot_rl.cli", "train", *argv]
    print(f"robot-rl train: launching {nproc} processes: {' '.join(cmd[1:])}", file=sys.stderr)
    return subprocess.run(cmd, check=False).returncode


def rank_overrides(argv: list[str], cfg: TrainConfig) -> list[str]:
    """Under torchrun: join the process group and give every rank rank 0's run directory (each would pick
    its own ``outputs/<date>/<time>``); ranks other than 0 leave Hydra's ``.hydra/`` record to rank 0."""
    from robot_rl import distributed

    distributed.init(cfg.sim.device)
    extra = []
    if not cfg.resume and not any(a.startswith("hydra.run.dir=") for a in argv):
        extra.append(f"hydra.run.dir={distributed.broadcast_object(_run_dir(None))}")
    if not distributed.is_main():
        extra.append("hydra.output_subdir=null")
    return [*argv, *extra]


def main(argv: list[str]) -> int:
    """Run Hydra on ``argv`` (overrides, ``-m``, ``--cfg job``, ``--help``); 2 on bad input."""
    import hydra
    from omegaconf import OmegaConf

    from robot_rl import distributed
    from robot_rl.compose import load_schemas
    from robot_rl.config import CONFIG_DIR
    from robot_rl.errors import EXIT_BAD_INPUT, InputError, user_error_types

    load_schemas()
    try:
        if any(a in ("-h", "--help") for a in argv):
            print(help_text(argv))
            return 0
        cfg = check_overrides(argv)
        if distributed.launched() and cfg is None:
            raise InputError("sweeps and Hydra's flags run in one process", key="-m / --cfg / --help",
                             fix="drop them under torchrun (or run a sweep of single-process runs)")
    except user_error_types() as exc:
        print(f"robot-rl train: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if cfg is not None and cfg.distributed.nproc > 1 and not distributed.under_launcher():
        return launch(argv, cfg.distributed.nproc)
    if distributed.launched():
        argv = rank_overrides(argv, cfg)
    OmegaConf.register_new_resolver("run_dir", _run_dir, use_cache=True, replace=True)
    app = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(_task)
    saved_argv = sys.argv
    sys.argv = ["robot-rl train", *argv]
    try:
        app()
    finally:
        sys.argv = saved_argv
        distributed.shutdown()
    return 0
