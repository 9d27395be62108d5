"""The training loop of every agent: collect, update when the agent is ready, log, checkpoint, evaluate, export.

:class:`Runner` drives any :class:`robot_rl.agents.Agent` through act / observe / ready / update, on-policy and
off-policy alike. Agents differ only in what ``ready`` / ``update`` do and in how long an *iteration* is (one log
row, one progress-line update, one count towards ``checkpoint_interval``), which the agent declares with
:meth:`~robot_rl.agents.Agent.iteration_done`: PPO ends an iteration with every update (one rollout); an
off-policy agent, which may update after every vector step, every ``agent.iteration_steps`` transitions and at
the end of the run. An iteration's logged agent metrics are the mean over the ``update`` calls it made.

Run directory layout::

    <run>/config.yaml          resolved TrainConfig (+ registry keys), written first
    <run>/checkpoints/step_*/  safetensors + YAML, atomic, newest 3 kept
    <run>/metrics.jsonl        every logged metric; <run>/tensorboard/ event files
    <run>/eval.json            final evaluation with 95% intervals
    <run>/policy/              exported artifact (contract 3)
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robot_rl import distributed
from robot_rl.agents import Agent, BasePolicy, EnvSpec, agent_class, make_agent
from robot_rl.checkpoint import (
    CheckpointError,
    NonFiniteStateError,
    clean_stale_tmp,
    list_checkpoints,
    load_checkpoint,
    newest_intact,
    save_checkpoint,
)
from robot_rl.config.io import save_train_config, train_config_to_dict
from robot_rl.config.schema import TrainConfig
from robot_rl.data.lerobot.meta import copy_description
from robot_rl.errors import InputError
from robot_rl.train.evaluation import evaluate, playable
from robot_rl.train.metrics_log import MetricLogger, scalars
from robot_rl.train.progress import Progress

EnvFactory = Callable[[int, int], Any]
"""``factory(num_envs, seed) -> sim.VecEnv``."""


def sim_env_factory(cfg: TrainConfig) -> EnvFactory:
    """Build envs of the configured task with ``sim.make_env`` (task overrides applied)."""
    import sim
    from sim.errors import SimInputError

    def make(num_envs: int, seed: int) -> Any:
        try:
            return sim.make_env(cfg.task.name, num_envs=num_envs, device=cfg.sim.device, seed=seed,
                                backend=cfg.sim.backend, **dict(cfg.task.env))
        except SimInputError as exc:  # sim's refusal of a task name or setting (a bug still raises as itself)
            fix = ("an Isaac Lab task id and keys of its env cfg (docs/isaaclab.md)" if cfg.sim.backend == "isaaclab"
                   else "pick a task of `robot-rl sim list`, only the settings it lists, and a backend it runs on "
                   "(docs/gpu.md)")
            raise InputError(f"sim refused the task: {exc}", key="task.name / task.env / sim.backend",
                             value={"name": cfg.task.name, "env": dict(cfg.task.env), "backend": cfg.sim.backend},
                             fix=fix) from None

    return make


class TrainingDivergedError(InputError):
    """Training produced NaN or infinite losses or weights; the run stopped without saving them."""


class EpisodeStats:
    """Returns, lengths, successes and time-outs of the most recently finished episodes (all envs)."""

    def __init__(self, num_envs: int, device: torch.device, window: int = 200) -> None:
        self.ret = torch.zeros(num_envs, device=device)
        self.len = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.successes: deque[bool] = deque(maxlen=window)
        self.timeouts: deque[bool] = deque(maxlen=window)

    def add(self, step: Any, success: bool = True, survival: bool = True) -> None:
        """Accumulate one ``sim.Step``; finished episodes enter the window. ``success`` / ``survival``: whether the
        env defines them (``env.has_success``, ``env.has_terminations``); the window keeps only what it does."""
        self.ret += step.reward
        self.len += 1
        done = step.terminated | step.truncated
        if bool(done.any()):
            self.returns.extend(self.ret[done].tolist())
            self.lengths.extend(self.len[done].tolist())
            if survival:
                self.timeouts.extend((step.truncated & ~step.terminated)[done].tolist())
            if success and "success" in step.info:
                self.successes.extend(step.info["success"][done].tolist())
            self.ret[done] = 0.0
            self.len[done] = 0

    def means(self) -> dict[str, float]:
        """Window means (empty dict before the first finished episode); ``episode/survival``: the fraction that
        ended by the time limit, not a termination."""
        out = {}
        if self.returns:
            out["episode/return"] = sum(self.returns) / len(self.returns)
            out["episode/length"] = sum(self.lengths) / len(self.lengths)
        if self.timeouts:
            out["episode/survival"] = sum(self.timeouts) / len(self.timeouts)
        if self.successes:
            out["episode/success"] = sum(self.successes) / len(self.successes)
        return out


@dataclass
class RunResult:
    """What a finished run reports."""

    run_dir: Path
    env_steps: int
    updates: int
    """Iterations (log rows) of the run, as :attr:`Runner.updates` counts them."""
    wall_s: float
    final_stats: dict[str, float]
    eval: dict[str, Any] | None
    artifact: Path | None


DATASET_DESCRIPTION_DIR = "dataset_meta"
"""Under a run: the description (features, task strings) of the dataset its agent is built from."""


def _mismatch(exc: Exception) -> str:
    """``<Type>: <message>`` on one line, at most 400 characters: why a checkpoint's state did not load."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"


class Runner:
    """Own the loop for one run directory; resumes from its latest checkpoint when there is one."""

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, env_factory: EnvFactory | None = None,
                 resume: bool = False, num_envs: int | None = None, strict: bool = False) -> None:
        """Args: env_factory: defaults to :func:`sim_env_factory`; resume: continue from the newest intact
        checkpoint of ``run_dir`` (its ``config.yaml`` is left as is); num_envs: override the task's;
        strict: load the newest checkpoint or fail (evaluation, export), never fall back to an older one."""
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.sim.num_threads > 0:
            torch.set_num_threads(cfg.sim.num_threads)
        self.seed = distributed.rank_seed(cfg.seed)  # cfg.seed in one process; per rank under torchrun
        torch.manual_seed(self.seed)
        self.env_factory = env_factory or sim_env_factory(cfg)
        self.env = self.env_factory(num_envs or cfg.task.num_envs, self.seed)
        self.agent: Agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(self.env), cfg.sim.device,
                                       base_policy=self._base_policy(cfg))
        distributed.broadcast_modules(self.agent.networks().values())  # data parallel: rank 0's weights
        self.env_steps = 0
        """Transitions collected (all envs); for an :attr:`offline <robot_rl.agents.Agent.offline>` agent,
        gradient updates done (the run's progress counter either way: log steps, checkpoint names)."""
        self.updates = 0
        """Iterations done (:meth:`Agent.iteration_done <robot_rl.agents.Agent.iteration_done>`): log rows;
        ``checkpoint_interval`` counts them."""
        self.elapsed_s = 0.0
        if resume:
            self._resume_all_ranks(strict)
            return
        if distributed.is_main():
            save_train_config(cfg, self.run_dir / "config.yaml")
            self._keep_dataset_description(cfg)
        if cfg.init_from:
            self._init_from(Path(cfg.init_from))

    def _init_from(self, source: Path) -> None:
        """Start from the agent of ``source``'s newest intact checkpoint (every rank reads the same one); the
        replay buffer, counters and RNG stay this run's. :class:`CheckpointError` when none fits this config."""
        ckpt = newest_intact(list_checkpoints(source))
        if ckpt is None:
            raise CheckpointError("init_from: no intact checkpoint", file=source / "checkpoints",
                                  fix="init_from=<a run directory that has trained (robot-rl train wrote it)>")
        _, state = load_checkpoint(ckpt, self.cfg.sim.device)
        state["agent"].pop("buffer", None)  # transitions of the old rewards and env count: collected afresh
        try:
            self.agent.load_state_dict(state["agent"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:  # another agent, network or obs/action size
            raise CheckpointError(f"init_from: does not fit this run's config ({_mismatch(exc)})",
                                  file=ckpt, fix="keep the agent, network sizes, observations and actions of "
                                  "the run it was trained in; change rewards, limits, commands, learning settings",
                                  ) from None
        if distributed.is_main():
            print(f"robot-rl: starting from the weights of {ckpt} (env step {int(state['runner']['env_steps']):,})",
                  file=sys.stderr)

    def _keep_dataset_description(self, cfg: TrainConfig) -> None:
        """Copy the description of the dataset the agent is built from (:attr:`robot_rl.agents.Agent.dataset_key`)
        into the run (:data:`DATASET_DESCRIPTION_DIR`): the run opens without the dataset (``run_loading.open_run``)."""
        key = type(self.agent).dataset_key
        if key and getattr(cfg.agent, key):
            copy_description(Path(getattr(cfg.agent, key)), self.run_dir / DATASET_DESCRIPTION_DIR)

    @staticmethod
    def _base_policy(cfg: TrainConfig) -> BasePolicy | None:
        """The trained policy the agent builds on (:attr:`robot_rl.agents.Agent.base_policy_key`), or None."""
        key = agent_class(cfg.agent).base_policy_key
        if key is None:
            return None
        from robot_rl.train.run_loading import load_base_policy  # it opens a run with this class

        return load_base_policy(getattr(cfg.agent, key))

    def _resume_all_ranks(self, strict: bool) -> None:
        """:meth:`_resume` on rank 0 (which may set corrupt checkpoints aside), then on the other ranks, which
        load the same checkpoint (rank 0's replay buffer, if any) and draw their own random numbers after it."""
        if not distributed.is_main():
            distributed.barrier()
        self._resume(strict)
        if distributed.is_main():
            distributed.barrier()
        else:
            torch.manual_seed(self.seed + self.env_steps)

    def _resume(self, strict: bool) -> None:
        """Load the newest checkpoint; unless ``strict``, fall back past corrupt ones (saying so on stderr
        and renaming them ``corrupt_step_*``, so neither a save nor pruning removes them)."""
        found = list_checkpoints(self.run_dir)
        if not found:
            raise CheckpointError("no checkpoint to load", file=self.run_dir / "checkpoints",
                                  fix="train first (a checkpoint is written every checkpoint_interval updates)")
        if not strict:
            clean_stale_tmp(self.run_dir)
        skipped: list[tuple[Path, CheckpointError]] = []
        for ckpt in reversed(found if not strict else found[-1:]):
            try:
                _, state = load_checkpoint(ckpt, self.cfg.sim.device)
            except CheckpointError as exc:
                if strict:
                    intact = newest_intact(found[:-1])
                    hint = f"; the newest intact one is {intact}" if intact else "; no older checkpoint is intact"
                    raise CheckpointError(exc.problem + hint, file=exc.file, fix=exc.fix) from None
                skipped.append((ckpt, exc))
                continue
            self._restore(state, ckpt)
            for bad, exc in skipped:
                moved, n = bad.with_name(f"corrupt_{bad.name}"), 1
                while moved.exists():
                    moved, n = bad.with_name(f"corrupt_{bad.name}.{n}"), n + 1
                bad.rename(moved)
                print(f"robot-rl: checkpoint {bad.name} is unusable ({exc}); moved it to {moved.name}",
                      file=sys.stderr)
            if skipped:
                print(f"robot-rl: resuming from the newest intact checkpoint {ckpt.name} "
                      f"(env step {self.env_steps:,})", file=sys.stderr)
            return
        reasons = "; ".join(f"{p.name}: {e}" for p, e in skipped)
        raise CheckpointError(f"no intact checkpoint: {reasons}", file=self.run_dir / "checkpoints",
                              fix="start a new run (nothing was changed in this one)")

    def _restore(self, state: dict[str, Any], ckpt: Path) -> None:
        """Apply a loaded checkpoint state; :class:`CheckpointError` when it does not fit this config."""
        if self.env.num_envs != self.cfg.task.num_envs and isinstance(state.get("agent"), dict):
            # Opened to evaluate/inspect with another env count (robot-rl eval, critic-report): a replay
            # buffer laid out [capacity, training num_envs, ...] cannot be restored, and is not needed.
            state["agent"].pop("buffer", None)
        try:
            self.agent.load_state_dict(state["agent"])
            runner = state["runner"]
            env_steps, updates = int(runner["env_steps"]), int(runner["updates"])
            elapsed_s = float(runner["elapsed_s"])
            torch.set_rng_state(runner["torch_rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:  # shapes or keys of another config
            raise CheckpointError(f"does not fit the run's config.yaml ({_mismatch(exc)})", file=ckpt,
                                  fix="restore the config.yaml this run was trained with") from None
        self.env_steps, self.updates, self.elapsed_s = env_steps, updates, elapsed_s

    def state_dict(self) -> dict[str, Any]:
        """Agent state plus the runner's counters and RNG."""
        return {
            "agent": self.agent.state_dict(),
            "runner": {
                "env_steps": self.env_steps,
                "updates": self.updates,
                "elapsed_s": self.elapsed_s,
                "torch_rng": torch.get_rng_state(),
            },
        }

    def checkpoint(self) -> Path | None:
        """Save a checkpoint at the current step (rank 0 only: ``None`` on the others);
        :class:`TrainingDivergedError` (saving nothing) on NaN/inf."""
        if not distributed.is_main():
            return None
        try:
            return save_checkpoint(self.run_dir, self.env_steps, self.state_dict())
        except NonFiniteStateError as exc:
            raise self._diverged(str(exc)) from None

    def _diverged(self, what: str) -> TrainingDivergedError:
        last = newest_intact(list_checkpoints(self.run_dir))
        kept = f"the last finite checkpoint is {last}" if last else "no checkpoint was saved before it"
        return TrainingDivergedError(
            f"training diverged at update {self.updates} (env step {self.env_steps:,}): {what}; stopped without "
            f"saving it ({kept})", file=self.run_dir,
            fix="lower agent.learning_rate (or the agent's loss weights), then start again or resume=<run dir>")

    def check_finite(self, metrics: dict[str, float]) -> None:
        """Stop with :class:`TrainingDivergedError` if an update's metrics (floats) hold NaN or inf."""
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
        if bad:
            raise self._diverged(f"non-finite {', '.join(f'{k}={v}' for k, v in bad.items())}")

    def _collect(self, obs: Any, stats: EpisodeStats, env_logs: dict[str, list[float]]) -> Any:
        """One vector step: act, step the env, let the agent observe it, count it; returns the next obs."""
        env, agent = self.env, self.agent
        action = agent.act(obs)
        step = env.step(action.clamp(env.action_low, env.action_high))
        agent.observe(obs, action, step)
        stats.add(step, env.has_success, env.has_terminations)
        for k, v in step.info.get("log", {}).items():
            env_logs.setdefault(k, []).append(float(v))
        self.env_steps += env.num_envs * distributed.world_size()  # the budget counts every rank's envs
        return step.obs

    def learn(self, evaluate_and_export: bool = True) -> RunResult:
        """Train up to ``task.total_steps`` (an offline agent: its ``offline_updates()``) or ``max_train_s``, then
        evaluate and export (unless disabled)."""
        cfg, env, agent = self.cfg, self.env, self.agent
        total = agent.offline_updates() if agent.offline else cfg.task.total_steps
        logger = MetricLogger(self.run_dir, list(cfg.logger.backends), cfg.logger.wandb_project,
                              train_config_to_dict(cfg), enabled=distributed.is_main())
        progress = Progress(total, self.env_steps, enabled=cfg.logger.progress and distributed.is_main())
        stats = EpisodeStats(env.num_envs, env.device)
        env_logs: dict[str, list[float]] = {}
        sums: dict[str, float | torch.Tensor] = {}  # device tensors: converted once per iteration, by scalars()
        update_calls = 0
        obs = None if agent.offline else env.reset(seed=self.seed + self.updates)  # resumed: fresh episodes
        start = time.monotonic()
        base_elapsed, iteration_start = self.elapsed_s, self.env_steps
        collect_s = learn_s = 0.0
        agent.train_mode(True)
        try:
            while self.env_steps < total and not self._out_of_time(base_elapsed + time.monotonic() - start):
                t0 = time.monotonic()
                if agent.offline:
                    self.env_steps += 1  # counts this update
                else:
                    obs = self._collect(obs, stats, env_logs)
                t1 = time.monotonic()
                collect_s += t1 - t0
                updated = agent.ready()
                if updated:
                    for k, v in agent.update().items():
                        sums[k] = sums[k] + v if k in sums else v
                    update_calls += 1
                    learn_s += time.monotonic() - t1
                final = self.env_steps >= total or self._out_of_time(base_elapsed + time.monotonic() - start)
                if not agent.iteration_done(self.env_steps - iteration_start, updated, final):
                    continue
                self.updates += 1
                self.elapsed_s = base_elapsed + time.monotonic() - start
                metrics = scalars({k: v / max(update_calls, 1) for k, v in sums.items()})  # one sync per iteration
                self.check_finite(metrics)
                metrics.update(stats.means())
                metrics.update({f"env/{k}": sum(v) / len(v) for k, v in env_logs.items()})
                metrics["perf/collect_s"] = collect_s
                metrics["perf/learn_s"] = learn_s
                metrics["perf/steps_per_s"] = self.env_steps / max(self.elapsed_s, 1e-9)
                metrics["perf/wall_s"] = self.elapsed_s
                logger.log(metrics, self.env_steps)
                means = stats.means()
                progress.update(self.env_steps, means.get("episode/return"), means.get("episode/success"),
                                means.get("episode/survival"))
                if self.updates % cfg.checkpoint_interval == 0:
                    self.checkpoint()
                sums, env_logs, update_calls, collect_s, learn_s = {}, {}, 0, 0.0, 0.0
                iteration_start = self.env_steps
            self.checkpoint()
        finally:
            progress.close()
            logger.close()
        result = RunResult(self.run_dir, self.env_steps, self.updates, self.elapsed_s, stats.means(), None, None)
        if evaluate_and_export:
            self.evaluate_and_export(result, env)
        return result

    def _out_of_time(self, elapsed_s: float) -> bool:
        """Whether ``max_train_s`` (when set) of training wall time, a resumed run's earlier time included, is spent."""
        return 0 < self.cfg.max_train_s <= elapsed_s

    def evaluate_and_export(self, result: RunResult, env: Any) -> None:
        """End of training: ``cfg.eval_episodes`` deterministic episodes, then the contract-3 artifact of
        ``cfg.export_formats`` (skipped, with a note, on tasks without a robot to deploy to). Rank 0 only."""
        cfg = self.cfg
        if not distributed.is_main():
            return
        result.eval = self.evaluate(cfg.eval_episodes) if cfg.eval_episodes > 0 else None
        if not cfg.export_formats:
            return
        from robot_rl.train.export_run import export_agent_policy, export_blocker

        blocker = export_blocker(env, cfg.task.name, self.agent.policy_inputs)
        if blocker is not None:
            print(f"export skipped: {blocker}")
            return
        training = {"env_steps": self.env_steps, "eval": result.eval or {}}
        result.artifact = export_agent_policy(self.agent, env, self.run_dir / "policy", cfg, training)

    def evaluate(self, episodes: int, video: Path | None = None) -> dict[str, Any]:
        """Evaluate the deterministic policy on a fresh env; writes ``<run>/eval.json``."""
        env = self.env_factory(min(episodes, self.cfg.task.num_envs), self.cfg.seed + 10_000)
        player = playable(self.agent)
        summary = evaluate(player, env, episodes, seed=self.cfg.seed + 10_000, video_path=video,
                           on_done=player.reset).summary()
        summary["env_steps"] = self.env_steps
        tmp = self.run_dir / ".eval.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(self.run_dir / "eval.json")
        return summary
