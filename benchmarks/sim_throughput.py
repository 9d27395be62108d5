"""Simulation throughput: our VecEnv beside raw ``Batch`` physics and gymnasium's vector envs.

For each task and env count it measures env-steps per second (control steps x envs) of

- ``VecEnv``: ``sim.make_env(task, N)`` stepping actions (the whole env: actions, physics,
  observations, rewards, terminations, resets);
- ``Batch``: raw ``mujoco.batch.Batch`` physics on the same compiled model (``env.model``), stepped
  as the backend does (``persistent=True``, ``nstep=decimation``, ``stage=mjSTAGE_VEL``) with the
  same controls: the ceiling of this machine;
- ``Sync`` / ``Async``: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` over a minimal single-env
  ``gymnasium.Env`` on the same model (``mj_step(nstep=decimation)``, observation qpos + qvel, the
  same time limit), i.e. the usual one-env-per-loop (or per-process) way; for the gymnasium
  locomotion tasks (``hopper``, ``ant``, ...) gymnasium's own env (``Hopper-v5``, ``Ant-v5``, ...);

and prints them in one table with the ratios. Targets (issue 2): VecEnv >= 0.8x Batch and >= 5x
gymnasium's vector envs at 64 envs. ``--actions zero`` (default) holds the default pose in every
variant, so all run the same physics; ``--actions random`` draws VecEnv actions in its bounds and
baseline controls in the actuators' ctrlrange.

    python benchmarks/sim_throughput.py --quick
    python benchmarks/sim_throughput.py --tasks so101_reach g1_walk --envs 1 16 64 256
    python benchmarks/sim_throughput.py --tasks g1_walk --envs 64 --profile
    python benchmarks/sim_throughput.py --tasks hopper ant --envs 64     # against Hopper-v5, Ant-v5
    python benchmarks/sim_throughput.py --tasks g1_walk --envs 1024 8192 --no-gym \
        --backend mujoco_warp --device cuda                                  # MuJoCo Warp on a GPU (docs/gpu.md)

``--backend mujoco_warp`` (the ``[gpu]`` extra) puts the VecEnv column on MuJoCo Warp, on ``--device``;
the baselines stay MuJoCo's CPU ``Batch`` and gymnasium.

The rows (one per task, env count and variant) go to ``--out`` (default ``docs/results/sim_throughput.json``,
beside ``sim_throughput.md``, with the command, commit, load and machine).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
_SHARED_ROBOTS = Path(__file__).resolve().parents[2] / "shared" / "robots"
if "ROBOT_RL_ASSETS" not in os.environ and _SHARED_ROBOTS.is_dir():
    os.environ["ROBOT_RL_ASSETS"] = str(_SHARED_ROBOTS)

from _results import RESULTS, write_rows  # noqa: E402

import sim  # noqa: E402 - after the asset path is set
from sim.backends import BACKENDS  # noqa: E402

DEFAULT_TASKS = ("so101_reach", "g1_walk")


@dataclass
class Setup:
    """What every variant of one (task, N) measurement shares.

    Attributes:
        model: the compiled model of the task's VecEnv.
        decimation: physics substeps per control step.
        init_qpos: ``[nq]`` the VecEnv's state after reset (env 0).
        controls: ``[K, N, nu]`` controls the baselines cycle through.
        actions: ``[K, N, action_dim]`` actions the VecEnv cycles through.
        max_episode_steps: time limit of the gymnasium baselines (the VecEnv's).
    """

    model: mujoco.MjModel
    decimation: int
    init_qpos: np.ndarray
    controls: np.ndarray
    actions: torch.Tensor
    max_episode_steps: int


Stepper = Callable[[int], object]
"""``step(k)``: one control step of every env, with the ``k``-th controls of the cycle."""


@dataclass
class Rate:
    """Throughput of one variant: env-steps per wall-clock second and per CPU second.

    On a shared, oversubscribed machine the wall-clock figure depends on how much CPU the variant
    wins from other users (64 worker processes win more than 2 threads); the CPU figure, which
    counts every thread and worker process it used, depends much less on the load.
    """

    wall: float
    cpu: float | None


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds used so far by this process (all threads) plus the processes ``pids`` (Linux)."""
    own = os.times()
    total = own.user + own.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
    return total


def measure(step: Stepper, num_envs: int, min_seconds: float, warmup: int, pids: list[int]) -> Rate:
    """Throughput of ``step(k)`` (one control step of ``num_envs`` envs), timed >= ``min_seconds``."""
    for k in range(warmup):
        step(k)
    count, cpu0, start = 0, cpu_seconds(pids), time.perf_counter()
    while True:
        step(count)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and count >= 3:
            cpu1 = cpu_seconds(pids)
            used = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
            return Rate(count * num_envs / elapsed, count * num_envs / used if used else None)


def make_setup(env: sim.VecEnv, num_envs: int, mode: str, pool: int = 16, seed: int = 0) -> Setup:
    """Controls and actions for ``mode`` ("zero" or "random"), from a freshly reset VecEnv."""
    rng = np.random.default_rng(seed)
    first = env.capture_state([0]).physics
    model = env.model
    init_ctrl = first["ctrl"][0]
    if mode == "zero":
        controls = np.broadcast_to(init_ctrl, (pool, num_envs, model.nu)).copy()
        actions = torch.zeros(pool, num_envs, env.action_dim)
    else:
        low = np.where(model.actuator_ctrllimited, model.actuator_ctrlrange[:, 0], init_ctrl)
        high = np.where(model.actuator_ctrllimited, model.actuator_ctrlrange[:, 1], init_ctrl)
        controls = rng.uniform(low, high, (pool, num_envs, model.nu))
        u = torch.as_tensor(rng.uniform(0.0, 1.0, (pool, num_envs, env.action_dim)), dtype=torch.float32)
        actions = env.action_low.cpu() + (env.action_high - env.action_low).cpu() * u
    return Setup(model, env.robot.control.decimation, first["qpos"][0], controls, actions,
                 env.max_episode_steps)


def vecenv_stepper(env: sim.VecEnv, setup: Setup) -> Stepper:
    """The VecEnv itself."""
    actions = setup.actions.to(env.device)
    return lambda k: env.step(actions[k % len(actions)])


def batch_stepper(setup: Setup, num_envs: int, nthread: int) -> Stepper:
    """Raw ``Batch`` physics stepped exactly as the backend steps it."""
    batch = mujoco.batch.Batch(setup.model, nsim=num_envs, nthread=nthread, persistent=True)
    batch.reset()
    qpos, ctrl = batch.bind("qpos"), batch.bind("ctrl")
    qpos[:] = setup.init_qpos
    batch.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)

    def step(k: int) -> None:
        ctrl[:] = setup.controls[k % len(setup.controls)]
        batch.step(nstep=setup.decimation, stage=mujoco.mjtStage.mjSTAGE_VEL)

    return step


class PhysicsOnlyEnv(gym.Env):
    """The minimal single gymnasium env on a compiled model: ctrl in, qpos + qvel out, time limit."""

    def __init__(self, model: mujoco.MjModel, decimation: int, init_qpos: np.ndarray, max_episode_steps: int) -> None:
        self.model, self.data = model, mujoco.MjData(model)
        self.decimation, self.init_qpos, self.limit = decimation, init_qpos, max_episode_steps
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (model.nq + model.nv,), np.float32)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (model.nu,), np.float64)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.data.qpos, self.data.qvel]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.init_qpos
        mujoco.mj_forward(self.model, self.data)
        self.steps = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.data.ctrl[:] = action
        mujoco.mj_step(self.model, self.data, nstep=self.decimation)
        self.steps += 1
        return self._obs(), 0.0, False, self.steps >= self.limit, {}


def gym_vector(kind: str, setup: Setup, num_envs: int, gym_id: str | None = None) -> gym.vector.VectorEnv:
    """gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv``, reset: over :class:`PhysicsOnlyEnv`, or
    over gymnasium's own env ``gym_id`` (the locomotion tasks reproduce one: ``env.cfg.gym_id``)."""
    model, decimation, qpos0, limit = setup.model, setup.decimation, setup.init_qpos, setup.max_episode_steps
    if gym_id is None:
        fns = [lambda: PhysicsOnlyEnv(model, decimation, qpos0, limit)] * num_envs
    else:
        fns = [lambda: gym.make(gym_id)] * num_envs
    vec = gym.vector.SyncVectorEnv(fns) if kind == "sync" else gym.vector.AsyncVectorEnv(fns)
    vec.reset(seed=0)
    return vec


def measure_all(steppers: dict[str, Stepper], pids: dict[str, list[int]], num_envs: int,
                args: argparse.Namespace) -> dict[str, Rate]:
    """Best rates of each stepper over ``args.repeats`` interleaved rounds (a shared machine's load
    varies: interleaving exposes every variant to it alike, the best round is the least disturbed)."""
    best: dict[str, Rate] = {}
    for round_ in range(args.repeats):
        for name, step in steppers.items():
            rate = measure(step, num_envs, args.seconds, args.warmup if round_ == 0 else 1, pids.get(name, []))
            old = best.get(name)
            best[name] = rate if old is None else Rate(max(old.wall, rate.wall), max(old.cpu or 0.0, rate.cpu or 0.0))
    return best


def vecenv_and_setup(task: str, num_envs: int, args: argparse.Namespace) -> tuple[sim.VecEnv, Setup]:
    """The reset VecEnv of ``task`` on ``args.backend`` / ``args.device``, and the setup of the baselines
    (made from the task's CPU ``Batch`` env: the baselines always run MuJoCo's CPU physics)."""
    env = sim.make_env(task, num_envs=num_envs, seed=0, nthread=args.nthread)
    env.reset(seed=0)
    setup = make_setup(env, num_envs, args.actions)
    if args.backend != "mujoco_batch":
        env.close()
        env = sim.make_env(task, num_envs=num_envs, device=args.device, seed=0, backend=args.backend)
        env.reset(seed=0)
    return env, setup


def measure_task(task: str, num_envs: int, args: argparse.Namespace) -> dict[str, Rate]:
    """Rates of every variant ("vec", "batch", "sync", "async") of ``task`` at ``num_envs``."""
    env, setup = vecenv_and_setup(task, num_envs, args)
    steppers = {"vec": vecenv_stepper(env, setup), "batch": batch_stepper(setup, num_envs, args.nthread)}
    vectors = {}
    if not args.no_gym:
        gym_id = getattr(getattr(env, "cfg", None), "gym_id", None)
        vectors["sync"] = gym_vector("sync", setup, num_envs, gym_id)
        if num_envs <= args.async_max_envs:
            vectors["async"] = gym_vector("async", setup, num_envs, gym_id)
    controls = setup.controls
    for kind, vector in vectors.items():
        steppers[kind] = lambda k, v=vector: v.step(controls[k % len(controls)])
    pids = {"async": [p.pid for p in vectors["async"].processes]} if "async" in vectors else {}
    try:
        return measure_all(steppers, pids, num_envs, args)
    finally:
        for vector in vectors.values():
            vector.close()
        env.close()


def profile_vecenv(env: sim.VecEnv, setup: Setup, steps: int, top: int = 25) -> None:
    """cProfile of ``steps`` VecEnv steps, the ``top`` functions by own time."""
    profiler = cProfile.Profile()
    actions = setup.actions.to(env.device)
    profiler.enable()
    for k in range(steps):
        env.step(actions[k % len(actions)])
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def _rate(value: float | None) -> str:
    return f"{value:>10,.0f}" if value else f"{'-':>10}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:>8.2f}x" if a and b else f"{'-':>9}"


def print_table(title: str, rows: list[tuple[str, int, dict[str, float | None]]]) -> None:
    """One table: rates of every variant and the VecEnv's ratios to the others."""
    header = (f"{'task':<14}{'envs':>5}{'VecEnv':>11}{'Batch':>11}{'Sync':>11}{'Async':>11}"
              f"{'Vec/Batch':>10}{'Vec/Sync':>10}{'Vec/Async':>10}")
    print(f"\n{title}\n{header}\n{'-' * len(header)}")
    for task, n, r in rows:
        vec, raw, sync, asyn = (r.get(k) for k in ("vec", "batch", "sync", "async"))
        print(f"{task:<14}{n:>5}{_rate(vec)}{_rate(raw)}{_rate(sync)}{_rate(asyn)}"
              f"{_ratio(vec, raw):>10}{_ratio(vec, sync):>10}{_ratio(vec, asyn):>10}")


def flat_rows(rows: list[tuple[str, int, dict[str, Rate]]]) -> list[dict[str, object]]:
    """One plain row per (task, env count, variant) of the measured ``(task, N, {variant: Rate})``, with the
    VecEnv's ratios to that variant (wall and CPU; None where a rate is missing)."""
    out = []
    for task, n, rates in rows:
        vec = rates.get("vec")
        for variant, rate in rates.items():
            out.append({"task": task, "envs": n, "variant": variant, "steps_per_wall_s": rate.wall,
                        "steps_per_cpu_s": rate.cpu,
                        "vec_over_this_wall": vec.wall / rate.wall if vec and rate.wall else None,
                        "vec_over_this_cpu": vec.cpu / rate.cpu if vec and vec.cpu and rate.cpu else None})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS),
                        help="tasks to measure; ones not in sim.list_tasks() are reported and skipped")
    parser.add_argument("--envs", nargs="+", type=int, default=[1, 16, 64, 256], help="env counts")
    parser.add_argument("--actions", choices=("zero", "random"), default="zero",
                        help="zero: hold the default pose (same physics everywhere); random: uniform actions")
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum timed seconds per measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before the first measurement")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved rounds over the variants; the best round of each is printed")
    parser.add_argument("--nthread", type=int, default=0, help="Batch C threads (0: all CPUs), VecEnv and raw Batch")
    parser.add_argument("--async-max-envs", type=int, default=64,
                        help="skip AsyncVectorEnv above this many envs (it starts one process per env)")
    parser.add_argument("--backend", choices=BACKENDS, default="mujoco_batch",
                        help="the VecEnv's physics (mujoco_warp: the [gpu] extra)")
    parser.add_argument("--device", default="cpu", help="torch device of the VecEnv (cuda: with --backend mujoco_warp)")
    parser.add_argument("--no-gym", action="store_true", help="skip the gymnasium vector env baselines")
    parser.add_argument("--quick", action="store_true", help="short run: 1/16/64 envs, 0.3 s per measurement")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile the VecEnv of each task at the largest env count")
    parser.add_argument("--out", type=Path, default=RESULTS / "sim_throughput.json",
                        help="JSON file for the rows (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.envs = [n for n in args.envs if n <= 64] or [1, 16, 64]
        args.seconds, args.warmup, args.repeats = 0.3, 2, 2
    bad = [n for n in args.envs if n < 1]
    if bad:
        parser.error(f"--envs {bad[0]}: env counts must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print the table."""
    args = parse_args(argv)
    known = set(sim.list_tasks())
    tasks = [t for t in args.tasks if t in known]
    for missing in sorted(set(args.tasks) - known):
        print(f"skipping {missing!r}: not registered (sim.list_tasks() has {', '.join(sorted(known))})")
    if not tasks:
        print("no task to measure")
        return 1
    torch.set_num_threads(1)
    print(f"CPUs: {os.cpu_count()}  VecEnv: {args.backend} on {args.device}  Batch nthread: {args.nthread or 'all'}  "
          f"actions: {args.actions}  "
          f"best of {args.repeats} interleaved rounds of >= {args.seconds} s  "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for task in tasks:
        for n in args.envs:
            rates = measure_task(task, n, args)
            rows.append((task, n, rates))
            print(f"measured {task} x {n}: " + ", ".join(f"{k} {v.wall:,.0f}/s" for k, v in rates.items()), flush=True)
    print_table("env-steps per wall-clock second", [(t, n, {k: v.wall for k, v in r.items()}) for t, n, r in rows])
    print_table("env-steps per CPU second (all threads and worker processes counted)",
                [(t, n, {k: v.cpu for k, v in r.items()}) for t, n, r in rows])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_rows(args.out, flat_rows(rows), ["benchmarks/sim_throughput.py", *(sys.argv[1:] if argv is None else argv)],
               settings={k: str(v) for k, v in vars(args).items()})
    for task in tasks if args.profile else []:
        n = max(args.envs)
        print(f"\ncProfile of {task} VecEnv.step at {n} envs (own time):")
        env, setup = vecenv_and_setup(task, n, args)
        profile_vecenv(env, setup, steps=max(20, int(50 * args.seconds)))
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
