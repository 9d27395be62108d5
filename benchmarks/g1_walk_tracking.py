"""g1_walk velocity tracking and survival of a trained policy artifact, with and without pushes.

    python benchmarks/g1_walk_tracking.py <run dir> [--episodes 100] [--out docs/results/g1_walk/tracking.json]

Evaluates ``<run>/policy`` (the exported artifact, through onnxruntime as ``robot-rl eval`` does) on ``g1_walk``
(``g1_walk_gait`` for a run of a gait-clock task): one
deterministic 20 s episode per env, ``--episodes`` envs, commands drawn by the task (vx in [-0.5, 1.0] m/s, vy in
[-0.3, 0.3] m/s, yaw rate in [-0.8, 0.8] rad/s, redrawn every 5 s, 10% of draws zero), under two conditions: no
pushes (the task as registered) and the pushes a push-trained run saw (every 5-8 s, up to 0.5 m/s per axis). Per
condition: survival (episodes that end by the time limit, not a fall, Wilson 95% interval) and the tracking errors
while upright, averaged over every control step of every episode until it ends: ``|cmd_xy - v_xy|`` (m/s, base
frame) and ``|cmd_yaw - w_z|`` (rad/s), beside the errors a robot standing still would make (``|cmd_xy|``,
``|cmd_yaw|``) so the figure has its scale. Rows go to ``--out`` with the command, commit and load, with the run's
training curve (``metrics.jsonl``: survival and mean episode length of the last 200 training episodes) and its
SVG beside them.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _results import RESULTS, write_rows
from g1_stand_survival import (
    curve_rows,
    curve_svg,
    evaluation_control,
    evaluation_task,
    run_args,
    run_task,
    task_configs,
)

PUSHES = {"no pushes": None, "pushes 0.5 m/s (5-8 s)": ((5.0, 8.0), 0.5)}
"""Condition -> ``(push_interval_s, push_velocity)`` (None: g1_walk as registered, no pushes)."""


def _slope(value: float | None) -> str:
    return "n/a (constant command)" if value is None else f"{value:.2f}"


@dataclasses.dataclass
class Tracking:
    """Sums over the control steps of each env's first episode (envs ``[N]``; per axis vx, vy, yaw rate ``[N, 3]``)."""

    lin_error: torch.Tensor
    yaw_error: torch.Tensor
    lin_still: torch.Tensor
    yaw_still: torch.Tensor
    steps: torch.Tensor
    commanded: torch.Tensor
    measured: torch.Tensor
    commanded_sq: torch.Tensor
    product: torch.Tensor

    @classmethod
    def zeros(cls, n: int) -> Tracking:
        """Empty sums for ``n`` envs."""
        return cls(*(torch.zeros(n, dtype=torch.float64) for _ in range(5)),
                   *(torch.zeros(n, 3, dtype=torch.float64) for _ in range(4)))

    def add(self, live: torch.Tensor, command: torch.Tensor, lin_vel_xy: torch.Tensor, yaw_rate: torch.Tensor) -> None:
        """One control step: ``live [N]`` bool (the env is still in its first episode), ``command [N, 3]`` (vx, vy,
        yaw rate), ``lin_vel_xy [N, 2]`` and ``yaw_rate [N]`` measured in the base frame."""
        w = live.double()
        self.lin_error += w * torch.linalg.norm(command[:, :2] - lin_vel_xy, dim=1).double()
        self.yaw_error += w * (command[:, 2] - yaw_rate).abs().double()
        self.lin_still += w * torch.linalg.norm(command[:, :2], dim=1).double()
        self.yaw_still += w * command[:, 2].abs().double()
        self.steps += w
        cmd, got = command.double(), torch.cat([lin_vel_xy, yaw_rate[:, None]], dim=1).double()
        self.commanded += w[:, None] * cmd
        self.measured += w[:, None] * got
        self.commanded_sq += w[:, None] * cmd**2
        self.product += w[:, None] * cmd * got

    def summary(self) -> dict[str, float]:
        """Step-weighted means over every env's steps (m/s, rad/s), the mean measured yaw rate (a policy that turns
        one way whatever the command shows here), and per axis the least-squares slope of the measured velocity on
        the commanded one (1: follows the command, 0: ignores it; None on an axis whose command never varied,
        e.g. a task that commands no yaw rate: there is no slope to fit)."""
        n = float(self.steps.sum())
        c, m, cc, cm = (x.sum(dim=0) for x in (self.commanded, self.measured, self.commanded_sq, self.product))
        spread = n * cc - c**2
        slope = [float(a / b) if b > 1e-9 * n * n else None for a, b in zip(n * cm - c * m, spread, strict=True)]
        return {"lin_vel_error": float(self.lin_error.sum()) / n, "yaw_rate_error": float(self.yaw_error.sum()) / n,
                "lin_vel_error_standing_still": float(self.lin_still.sum()) / n,
                "yaw_rate_error_standing_still": float(self.yaw_still.sum()) / n, "steps": int(n),
                "yaw_rate_mean": float(m[2]) / n,
                "slope_vx": slope[0], "slope_vy": slope[1], "slope_yaw_rate": slope[2]}


def evaluate_tracking(artifact: Path, episodes: int, seed: int, pushes: tuple | None,
                      task: str = "g1_walk", control: dict[str, Any] | None = None) -> dict[str, Any]:
    """Survival and tracking of the artifact over one ``task`` (g1_walk or g1_walk_gait) episode in each of
    ``episodes`` envs; ``control``: the task's control overrides (``evaluation_control``)."""
    import sim
    from robot_rl.deploy.runtime import PolicyRuntime
    from robot_rl.deploy.validate import RobotSpec
    from robot_rl.train.artifact_eval import ArtifactPolicy
    from robot_rl.train.evaluation import survival_summary
    from sim.tasks import terms

    overrides = {}
    if pushes is not None:
        interval, velocity = pushes
        overrides["randomization"] = dataclasses.replace(task_configs()[task].randomization,
                                                         push_interval_s=interval, push_velocity=velocity)
    if control:
        overrides["control"] = control
    env = sim.make_env(task, num_envs=episodes, seed=seed, **overrides)
    policy = ArtifactPolicy(PolicyRuntime(artifact, robot=RobotSpec.from_robot(env.robot.as_dict())))
    obs = env.reset(seed=seed)
    live = torch.ones(episodes, dtype=torch.bool)
    survived = torch.zeros(episodes, dtype=torch.bool)
    sums = Tracking.zeros(episodes)
    start = time.perf_counter()
    while bool(live.any()):
        action = policy(obs["policy"])
        step = env.step(action)
        sums.add(live, env.command, terms.base_lin_vel(env)[:, :2], env.state.qvel[:, 5])  # before any reset
        done = step.terminated | step.truncated
        survived |= live & step.truncated & ~step.terminated
        live &= ~done
        policy.reset(done)
        obs = step.obs
    env.close()
    return {**survival_summary(survived.tolist()), **sums.summary(), "episodes": episodes,
            "wall_s": round(time.perf_counter() - start, 1)}


def main(argv: list[str]) -> int:
    """Evaluate the run's artifact under each condition; print and write the rows."""
    args = run_args(argv, __doc__, RESULTS / "g1_walk" / "tracking.json")
    trained, episode_s = run_task(args.run)
    task = evaluation_task(trained, "walk")
    control = evaluation_control(args.run, args.max_step_change)
    rows = []
    for name, pushes in PUSHES.items():
        row = evaluate_tracking(args.run / "policy", args.episodes, args.seed, pushes, task, control)
        lo, hi = row["survival_ci95"]
        print(f"{name}: survival {100 * row['survival_rate']:.1f}% [95% CI {100 * lo:.1f}-{100 * hi:.1f}] of "
              f"{row['episodes']} episodes; |v_xy error| {row['lin_vel_error']:.3f} m/s (standing still: "
              f"{row['lin_vel_error_standing_still']:.3f}), |yaw rate error| {row['yaw_rate_error']:.3f} rad/s "
              f"(standing still: {row['yaw_rate_error_standing_still']:.3f}); measured on commanded slope vx "
              f"{_slope(row['slope_vx'])}, vy {_slope(row['slope_vy'])}, yaw rate {_slope(row['slope_yaw_rate'])}; "
              "mean yaw rate "
              f"{row['yaw_rate_mean']:+.2f} rad/s", flush=True)
        rows.append({"condition": name, "task": task, "control": control, **row})
    metrics = args.run / "metrics.jsonl"
    curve = curve_rows(metrics) if metrics.is_file() else []
    write_rows(args.out, rows, run=str(args.run), curve=curve)
    if curve:
        args.out.with_suffix(".svg").write_text(curve_svg(curve, f"{trained} PPO: training survival",
                                                          episode_s=episode_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
