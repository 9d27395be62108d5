"""The off-policy training loop: act, store, update at the agent's UTD ratio after every env step.

Same run directory, checkpoints, resume, evaluation and export as
:class:`robot_rl.train.on_policy_runner.OnPolicyRunner` (it subclasses it and only replaces the
loop). The difference: an off-policy agent may update after *every* vector step (SAC with one env
updates once per transition), so logging, the progress line and checkpoints happen once per
*iteration* of ``agent.iteration_steps`` collected transitions instead of once per update call;
``checkpoint_interval`` counts those iterations.
"""

from __future__ import annotations

import time

import torch

from robot_rl import distributed
from robot_rl.config.io import train_config_to_dict
from robot_rl.train.metrics_log import MetricLogger, scalars
from robot_rl.train.on_policy_runner import EpisodeStats, OnPolicyRunner, RunResult
from robot_rl.train.progress import Progress


class OffPolicyRunner(OnPolicyRunner):
    """Own the loop of a replay-based agent; ``self.updates`` counts iterations (log points)."""

    def iteration_steps(self) -> int:
        """Transitions (all envs) per iteration: the agent's ``iteration_steps``, at least one vector step."""
        steps = int(getattr(self.cfg.agent, "iteration_steps", 1000))
        return max(steps, self.env.num_envs)

    def learn(self, evaluate_and_export: bool = True) -> RunResult:
        """Train up to ``task.total_steps``, then evaluate and export (unless disabled)."""
        cfg, env, agent = self.cfg, self.env, self.agent
        total, per_iteration = cfg.task.total_steps, self.iteration_steps()
        logger = MetricLogger(self.run_dir, list(cfg.logger.backends), cfg.logger.wandb_project,
                              train_config_to_dict(cfg), enabled=distributed.is_main())
        progress = Progress(total, self.env_steps, enabled=cfg.logger.progress and distributed.is_main())
        stats = EpisodeStats(env.num_envs, env.device)
        env_logs: dict[str, list[float]] = {}
        sums: dict[str, float | torch.Tensor] = {}  # device tensors: converted once per iteration, by the logger
        update_calls = 0
        obs = env.reset(seed=self.seed + self.updates)  # a resumed run starts fresh episodes
        start = time.monotonic()
        base_elapsed, iteration_start = self.elapsed_s, self.env_steps
        learn_s = 0.0
        agent.train_mode(True)
        try:
            while self.env_steps < total:
                obs = self._collect(obs, stats, env_logs)
                if agent.ready():
                    t0 = time.monotonic()
                    for k, v in agent.update().items():
                        sums[k] = sums.get(k, 0.0) + v
                    update_calls += 1
                    learn_s += time.monotonic() - t0
                if self.env_steps - iteration_start < per_iteration and self.env_steps < total:
                    continue
                self.updates += 1
                self.elapsed_s = base_elapsed + time.monotonic() - start
                metrics = scalars({k: v / max(update_calls, 1) for k, v in sums.items()})  # one sync, as the logger's
                self.check_finite(metrics)
                metrics.update(stats.means())
                metrics.update({f"env/{k}": sum(v) / len(v) for k, v in env_logs.items()})
                metrics["perf/learn_s"] = learn_s
                metrics["perf/steps_per_s"] = self.env_steps / max(self.elapsed_s, 1e-9)
                metrics["perf/wall_s"] = self.elapsed_s
                logger.log(metrics, self.env_steps)
                means = stats.means()
                progress.update(self.env_steps, means.get("episode/return"), means.get("episode/success"))
                if self.updates % cfg.checkpoint_interval == 0:
                    self.checkpoint()
                sums, env_logs, update_calls, learn_s = {}, {}, 0, 0.0
                iteration_start = self.env_steps
            self.checkpoint()
        finally:
            progress.close()
            logger.close()
        result = RunResult(self.run_dir, self.env_steps, self.updates, self.elapsed_s, stats.means(), None, None)
        if evaluate_and_export:
            self.evaluate_and_export(result, env)
        return result
