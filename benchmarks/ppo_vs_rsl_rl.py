"""Our PPO vs rsl_rl's PPO (PyPI ``rsl-rl-lib``) on the same VecEnv, side by side in one process.

Both drive ``so101_reach`` with the same number of envs, steps per env, epochs, mini-batches, network
sizes and PPO hyperparameters, including the noise parameterisation (all read from
``configs/agent/ppo.yaml`` + overrides and printed). Not equal settings by default: ``ppo.yaml`` turns
on two options of ours that rsl_rl lacks, ``agent.critic_learning_rate`` (the critic at a fixed 1e-3
while the adaptive-KL rate moves the actor's only; rsl_rl adapts both) and ``agent.normalize_rewards``
(reward scaling by the discounted return's std; rsl_rl: none); they are printed as "robot_rl only".
``agent.critic_learning_rate=null agent.normalize_rewards=false`` as overrides runs rsl_rl's algorithm
on both sides; the figures of that setting are docs/agents.md's "Earlier results, with rsl_rl's
algorithm on our side". What else differs is printed too: ours bootstraps truncated episodes from the
value of their final observation (rsl_rl: ``V(s_t)``) and reshuffles mini-batches every epoch (rsl_rl:
one permutation per update); negligible: the advantage std's 1/N vs 1/(N-1) and rsl_rl's one extra
update (it runs whole iterations). Apart from these, with the two options off, one update of each on the
same rollout and weights agrees (tests/test_ppo_rsl_parity.py). The same recorder wraps the env for
both, so "to X% success" is measured identically: the first finished batch of episodes at which the
success rate of the last ``num_envs`` finished training episodes reaches the threshold, reported as wall
seconds, process CPU seconds and env steps. Each policy is then evaluated deterministically with
``robot_rl.train.evaluation.evaluate``.

    python benchmarks/ppo_vs_rsl_rl.py                      # `robot-rl train task=so101_reach`, seed 0
    python benchmarks/ppo_vs_rsl_rl.py --seeds 0,1,2        # seeds run one after another
    python benchmarks/ppo_vs_rsl_rl.py --steps 300000 --num-envs 64
    python benchmarks/ppo_vs_rsl_rl.py agent.critic_learning_rate=null agent.normalize_rewards=false

Each run's rows (per seed and side: time/CPU/env steps to the threshold, throughput, final success,
load) go to ``--out`` (default ``docs/results/agents/ppo_vs_rsl_rl.json``; ``--update-time``:
``ppo_update_time.json``), with the settings, the command, commit, load and machine.

Sides alternate (even seeds: robot_rl first; odd seeds: rsl_rl first) so a load change on the
shared machine does not always hit the same side. Targets (issue 3): wall-clock to 90% <= 0.8x
rsl_rl's; final success >= rsl_rl's. Wall time moves with the machine's load (printed); CPU
seconds move much less, so both ratios are printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import RESULTS, write_rows

import sim
from robot_rl.compose import compose
from robot_rl.train.evaluation import evaluate
from robot_rl.train.runner import Runner


class ThresholdReached(Exception):  # noqa: N818 - a signal that ends training, not an error
    """Raised by a :class:`Recorder` with ``stop_at`` when its window success first reaches it: ends training."""


class Recorder(sim.VecEnv):
    """Pass-through VecEnv recording ``(wall s, CPU s, env steps, window success)`` per finished batch; the
    window is the last ``window`` finished episodes (default ``env.num_envs``). With ``stop_at``, the step at
    which :meth:`reached` first holds for it raises :class:`ThresholdReached` (after recording that point)."""

    def __init__(self, env: sim.VecEnv, window: int | None = None, stop_at: float | None = None) -> None:
        self.env = env
        for name in ("num_envs", "device", "dt", "max_episode_steps", "action_dim", "action_low",
                     "action_high", "observation_dims", "reward_groups", "observation_layout", "robot"):
            setattr(self, name, getattr(env, name))
        self.window: deque[bool] = deque(maxlen=window or env.num_envs)
        self.curve: list[tuple[float, float, int, float]] = []
        self.steps = 0
        self.t0: tuple[float, float] | None = None
        self.stop_at = stop_at

    def reset(self, seed: int | None = None) -> sim.Obs:
        return self.env.reset(seed)

    def step(self, action: torch.Tensor) -> sim.Step:
        if self.t0 is None:
            self.t0 = (time.monotonic(), time.process_time())
        step = self.env.step(action)
        self.steps += self.num_envs
        done = step.terminated | step.truncated
        if bool(done.any()):
            self.window.extend(step.info["success"][done].tolist())
            self.curve.append((time.monotonic() - self.t0[0], time.process_time() - self.t0[1], self.steps,
                               sum(self.window) / len(self.window)))
            if self.stop_at is not None and self.curve[-1][3] >= self.stop_at:
                raise ThresholdReached
        return step

    def reached(self, threshold: float) -> tuple[float, float, int] | None:
        """``(wall s, CPU s, env steps)`` when the window success first reached ``threshold`` (None if never)."""
        return next(((w, c, n) for w, c, n, s in self.curve if s >= threshold), None)


def make_rsl_env(rec: Recorder) -> Any:
    """Adapt a Recorder to rsl_rl's VecEnv (TensorDict observations, ``time_outs`` in extras)."""
    from rsl_rl.env import VecEnv as RslVecEnv
    from tensordict import TensorDict

    class RslAdapter(RslVecEnv):
        def __init__(self) -> None:
            self.num_envs, self.num_actions = rec.num_envs, rec.action_dim
            self.max_episode_length = rec.max_episode_steps
            self.episode_length_buf = torch.zeros(rec.num_envs, dtype=torch.long)
            self.device, self.cfg = rec.device, {}
            self.obs = rec.reset(seed=None)

        def _td(self, obs: sim.Obs) -> TensorDict:
            return TensorDict(dict(obs), batch_size=[self.num_envs])

        def get_observations(self) -> TensorDict:
            return self._td(self.obs)

        def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
            step = rec.step(actions.clamp(rec.action_low, rec.action_high))
            self.obs = step.obs
            done = step.terminated | step.truncated
            self.episode_length_buf = torch.where(done, 0, self.episode_length_buf + 1)
            return self._td(step.obs), step.reward, done.long(), {"time_outs": step.truncated, "log": {}}

    return RslAdapter()


def rsl_train_cfg(cfg: Any) -> dict:
    """rsl_rl 5.x runner config with our PPO/critic hyperparameters."""
    a, c = cfg.agent, cfg.critic
    return {
        "num_steps_per_env": a.num_steps_per_env,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "multi_gpu": None,
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": a.num_learning_epochs,
            "num_mini_batches": a.num_mini_batches, "clip_param": a.clip_param, "gamma": a.gamma,
            "lam": a.lam, "value_loss_coef": a.value_loss_coef, "entropy_coef": a.entropy_coef,
            "learning_rate": a.learning_rate, "max_grad_norm": a.max_grad_norm,
            "use_clipped_value_loss": a.use_clipped_value_loss, "schedule": a.schedule,
            "desired_kl": a.desired_kl,
        },
        "actor": {
            "class_name": "MLPModel", "hidden_dims": list(a.actor_hidden_dims), "activation": a.activation,
            "obs_normalization": a.normalize_obs,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": a.init_noise_std,
                                 "std_type": a.noise_std_type},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": list(c.hidden_dims), "activation": c.activation,
                   "obs_normalization": c.normalize_obs},
    }


def task_env(cfg: Any, num_envs: int, seed: int) -> sim.VecEnv:
    """``num_envs`` envs of the config's task with its ``task.env`` overrides (as ``robot-rl train`` builds them)."""
    return sim.make_env(cfg.task.name, num_envs=num_envs, seed=seed, **dict(cfg.task.env))


def run_ours(cfg: Any, seed: int, window: int | None = None,
             stop_at: float | None = None) -> tuple[Recorder, Any, float]:
    """Train our agent (``cfg.agent``); returns the recorder (success ``window``, ``stop_at``: :class:`Recorder`),
    the deterministic policy and the training wall seconds."""
    rec = Recorder(task_env(cfg, cfg.task.num_envs, seed), window, stop_at)
    runner = Runner(cfg, Path(os.environ.get("TMPDIR", "/tmp")) / f"ppo_bench_{os.getpid()}_{seed}",
                            env_factory=lambda n, s: rec)
    start = time.monotonic()
    try:
        runner.learn(evaluate_and_export=False)
    except ThresholdReached:
        pass
    return rec, runner.agent.policy(), time.monotonic() - start


def run_rsl(cfg: Any, seed: int, window: int | None = None,
            stop_at: float | None = None) -> tuple[Recorder, Any, float]:
    """Train rsl_rl's PPO on the same env; returns what :func:`run_ours` does."""
    from rsl_rl.runners import OnPolicyRunner as RslRunner

    torch.manual_seed(seed)
    rec = Recorder(task_env(cfg, cfg.task.num_envs, seed), window, stop_at)
    env = make_rsl_env(rec)
    runner = RslRunner(env, rsl_train_cfg(cfg), log_dir=None, device="cpu")
    iterations = -(-cfg.task.total_steps // (cfg.task.num_envs * cfg.agent.num_steps_per_env))
    start = time.monotonic()
    try:
        runner.learn(num_learning_iterations=iterations)
    except ThresholdReached:
        pass
    policy = runner.get_inference_policy(device="cpu")

    def act(obs: torch.Tensor) -> torch.Tensor:
        from tensordict import TensorDict

        return policy(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))

    return rec, act, time.monotonic() - start


def update_times(cfg: Any, batch: int, repeats: int = 5) -> tuple[float, float]:
    """Median CPU seconds of one PPO update on a ``batch``-sample rollout (8 steps x batch/8 envs):
    ours vs rsl_rl's (``compute_returns`` + ``update``), same networks and hyperparameters."""
    from rsl_rl.runners import OnPolicyRunner as RslRunner

    from robot_rl.agents import EnvSpec, make_agent

    n = max(1, batch // 8)
    ours_t, rsl_t = [], []
    env = task_env(cfg, n, 0)
    acfg = dataclasses.replace(cfg.agent, num_steps_per_env=8)
    agent = make_agent(acfg, cfg.critic, EnvSpec.from_env(env))
    rcfg = rsl_train_cfg(cfg)
    rcfg["num_steps_per_env"] = 8
    rsl_env = make_rsl_env(Recorder(env))
    alg = RslRunner(rsl_env, rcfg, log_dir=None, device="cpu").alg
    obs = env.reset(seed=0)
    td = rsl_env.get_observations()
    for _ in range(repeats):
        for _ in range(8):
            action = agent.act(obs)
            step = env.step(action.clamp(-1, 1))
            agent.observe(obs, action, step)
            obs = step.obs
        t = time.process_time()
        agent.update()
        ours_t.append(time.process_time() - t)
        with torch.inference_mode():
            for _ in range(8):
                td, rew, done, extras = rsl_env.step(alg.act(td))
                alg.process_env_step(td, rew, done, extras)
            t = time.process_time()
            alg.compute_returns(td)
        alg.update()
        rsl_t.append(time.process_time() - t)
    return sorted(ours_t)[repeats // 2], sorted(rsl_t)[repeats // 2]


def describe(cfg: Any) -> str:
    """The settings both sides share and the ones that differ, for the printout."""
    a, c = cfg.agent, cfg.critic
    shared = (f"{cfg.task.name}, {cfg.task.num_envs} envs x {a.num_steps_per_env} steps/env, "
              f"{a.num_learning_epochs} epochs x {a.num_mini_batches} mini-batches, actor {list(a.actor_hidden_dims)} "
              f"critic {list(c.hidden_dims)} {a.activation}, lr {a.learning_rate:g} ({a.schedule}, desired_kl "
              f"{a.desired_kl:g}), clip {a.clip_param:g}, gamma {a.gamma:g}, lam {a.lam:g}, entropy "
              f"{a.entropy_coef:g}, value coef {a.value_loss_coef:g}, max_grad_norm {a.max_grad_norm:g} "
              f"(actor and critic each), init std {a.init_noise_std:g} ({a.noise_std_type}), obs normalisation "
              f"{a.normalize_obs}/{c.normalize_obs} (updated once per rollout), {cfg.task.total_steps:,} steps")
    batch = cfg.task.num_envs * a.num_steps_per_env
    ours_updates = -(-cfg.task.total_steps // cfg.task.num_envs) // a.num_steps_per_env
    differ = ("differs: time-out bootstrap robot_rl V(final obs) / rsl_rl V(s_t); mini-batch permutation "
              "robot_rl per epoch / rsl_rl per update; advantage std robot_rl 1/N / rsl_rl 1/(N-1); updates "
              f"robot_rl {ours_updates} / rsl_rl {-(-cfg.task.total_steps // batch)} (rsl_rl runs whole iterations)")
    extras = [f"critic lr {a.critic_learning_rate:g} fixed (rsl_rl: the actor's adaptive rate)"
              if a.critic_learning_rate is not None else "",
              "reward scaling by the discounted return's std (rsl_rl: none)" if a.normalize_rewards else "",
              f"{a.update_threads} torch threads during updates (rsl_rl: the process's {torch.get_num_threads()})"
              if a.update_threads > 0 else ""]
    extras = [e for e in extras if e]
    ours_only = f"\nrobot_rl only: {'; '.join(extras)}" if extras else ""
    return f"both: {shared}\n{differ}{ours_only}"


def run_side(name: str, over: list[str], seed: int, eval_episodes: int, threshold: float,
             threads: int = 1, window: int | None = None, stop: bool = False) -> dict[str, Any]:
    """Train one side (``robot_rl`` or ``rsl_rl``) on one seed, then evaluate it; plain-data results
    (so it can run in a worker process). ``window``: episodes of the training success (:class:`Recorder`);
    ``stop``: end training when it first reaches ``threshold`` (the policy of that moment is evaluated)."""
    torch.set_num_threads(threads)
    cfg = compose([*over, f"seed={seed}"])
    load0, cpu0 = os.getloadavg()[0], time.process_time()
    rec, policy, wall = (run_ours if name == "robot_rl" else run_rsl)(cfg, seed, window, threshold if stop else None)
    cpu = time.process_time() - cpu0
    eval_env = task_env(cfg, min(eval_episodes, 64), seed + 10_000)
    with torch.no_grad():
        summary = evaluate(policy, eval_env, eval_episodes, seed=seed + 10_000).summary()
    print(f"seed {seed} {name}: done in {wall:.0f} s wall, {cpu:.0f} s CPU, load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    return {"hit": rec.reached(threshold), "wall": wall, "cpu": cpu, "sps": rec.steps / wall,
            "train": rec.curve[-1][3] if rec.curve else float("nan"), "eval": summary,
            "load": (load0 + os.getloadavg()[0]) / 2}


def run_all(over: list[str], seeds: list[int], eval_episodes: int, threshold: float, threads: int,
            parallel: bool) -> dict[int, dict[str, dict[str, Any]]]:
    """Every (seed, side) run. Sequential: per seed, sides alternate (even seeds robot_rl first);
    parallel: all runs at once in worker processes, so every side sees the same machine load."""
    jobs = [(seed, name) for seed in seeds
            for name in (("robot_rl", "rsl_rl") if seed % 2 == 0 else ("rsl_rl", "robot_rl"))]
    results: dict[int, dict[str, dict[str, Any]]] = {seed: {} for seed in seeds}
    if not parallel:
        for seed, name in jobs:
            results[seed][name] = run_side(name, over, seed, eval_episodes, threshold, threads)
        return results
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(jobs), mp_context=ctx) as pool:
        futures = {job: pool.submit(run_side, job[1], over, job[0], eval_episodes, threshold, threads)
                   for job in jobs}
        for (seed, name), fut in futures.items():
            results[seed][name] = fut.result()
    return results


def print_seed(seed: int, rows: dict[str, dict[str, Any]], threshold: float) -> None:
    """The per-seed table and its ratios."""
    to = f"to {threshold:.0%}"
    print(f"\nseed {seed}  {'':10s} {'wall ' + to:>12s} {'CPU ' + to:>11s} {'steps ' + to:>13s} {'wall s':>7s} "
          f"{'CPU s':>6s} {'steps/s':>8s} {'load':>5s} {'train succ':>10s} {'eval succ [95% CI]':>20s}")
    for name, r in rows.items():
        w, c, n = r["hit"] or ("never",) * 3
        e = r["eval"]
        lo, hi = e["success_ci95"]
        print(f"{'':7s} {name:10s} {_fmt(w, 's'):>12s} {_fmt(c, 's'):>11s} {_fmt(n, ''):>13s} {r['wall']:7.0f} "
              f"{r['cpu']:6.0f} {r['sps']:8.0f} {r['load']:5.1f} {r['train']:10.0%} "
              f"{e['success_rate']:6.0%} [{lo:.0%}, {hi:.0%}]")
    ours, theirs = rows["robot_rl"], rows["rsl_rl"]
    ratio = hit_ratios([rows])
    if ratio:
        w, c, n = ratio
        print(f"{'':7s} to {threshold:.0%}, robot_rl / rsl_rl: wall {w:.2f}x (target <= 0.8x), CPU {c:.2f}x, "
              f"env steps {n:.2f}x")
    else:
        print(f"{'':7s} to {threshold:.0%}: n/a (a run never reached it)")
    print(f"{'':7s} throughput robot_rl / rsl_rl {ours['sps'] / theirs['sps']:.2f}x; final eval success "
          f"{ours['eval']['success_rate']:.0%} vs {theirs['eval']['success_rate']:.0%} (target >=)", flush=True)


def hit_ratios(seeds: list[dict[str, dict[str, Any]]]) -> tuple[float, float, float] | None:
    """robot_rl / rsl_rl ``(wall, CPU, env steps)`` to the threshold, each summed over the seeds where both
    sides reached it (one seed: that seed's ratios); None where no seed has both. ``seeds``: per seed,
    ``{side: run_side's result}``."""
    hits = [r for r in seeds if r["robot_rl"]["hit"] and r["rsl_rl"]["hit"]]
    if not hits:
        return None
    return tuple(sum(r["robot_rl"]["hit"][i] for r in hits) / sum(r["rsl_rl"]["hit"][i] for r in hits)
                 for i in range(3))


def result_rows(results: dict[int, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One plain row per (seed, side) of :func:`run_all`'s results, for the results file."""
    rows = []
    for seed, sides in results.items():
        for side, r in sides.items():
            w, c, n = r["hit"] or (None,) * 3
            rows.append({"seed": seed, "side": side, "to_threshold_wall_s": w, "to_threshold_cpu_s": c,
                         "to_threshold_env_steps": n, "wall_s": r["wall"], "cpu_s": r["cpu"],
                         "steps_per_s": r["sps"], "train_success": r["train"], "load": r["load"],
                         "eval": r["eval"]})
    return rows


def seed_list(text: str) -> list[int]:
    """The ``--seeds`` argument: comma-separated integers."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 0,1") from None


def run_overrides(overrides: list[str]) -> list[str]:
    """The overrides of every benchmark run: ``task=so101_reach`` (2M steps, the task of the documented figures;
    a ``task=...`` among ``overrides`` wins), then ``overrides``, then no logger, evaluation or export."""
    return ["task=so101_reach", *overrides, "logger=none", "logger.progress=false", "eval_episodes=0",
            "export_formats=[]"]


def _fmt(x: Any, unit: str) -> str:
    return x if isinstance(x, str) else f"{x:,.0f}{' ' + unit if unit else ''}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: task.total_steps)")
    p.add_argument("--num-envs", type=int, default=None, help="parallel envs (default: task.num_envs)")
    p.add_argument("--threshold", type=float, default=0.9, help="training success threshold (default 0.9)")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seeds", type=seed_list, default="0", help="comma-separated seeds, e.g. 0,1,2 (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as sim=cpu)")
    p.add_argument("--parallel", action="store_true",
                   help="run every (seed, side) at once in its own process (same load for all; needs the cores "
                        "or reports slower wall times for both)")
    p.add_argument("--update-time", action="store_true",
                   help="only report the CPU time of one update at batch 256 and 4096, ours vs rsl_rl")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON file for the rows (default: docs/results/agents/ppo_vs_rsl_rl.json, or "
                        "ppo_update_time.json with --update-time)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides shared by both, e.g. agent.entropy_coef=0")
    args = p.parse_args()
    seeds = args.seeds
    torch.set_num_threads(args.threads)
    over = run_overrides(args.overrides)
    if args.steps:
        over.append(f"task.total_steps={args.steps}")
    if args.num_envs:
        over.append(f"task.num_envs={args.num_envs}")
    cfg = compose([*over, f"seed={seeds[0]}"])
    print(describe(cfg))
    print(f"rsl-rl-lib {version('rsl-rl-lib')}, torch {torch.__version__}, {args.threads} torch thread(s), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    settings = {"description": describe(cfg), "rsl_rl_lib": version("rsl-rl-lib"), "threshold": args.threshold}
    if args.update_time:
        rows = []
        for batch in (256, 4096):
            ours, theirs = update_times(cfg, batch)
            print(f"PPO update, batch {batch}: robot_rl {1000 * ours:.1f} ms, rsl_rl {1000 * theirs:.1f} ms "
                  f"CPU time (ratio {ours / theirs:.2f}x)")
            rows.append({"batch": batch, "robot_rl_cpu_ms": 1000 * ours, "rsl_rl_cpu_ms": 1000 * theirs})
        write_rows(args.out or RESULTS / "agents" / "ppo_update_time.json", rows, settings=settings)
        return 0
    results = run_all(over, seeds, args.eval_episodes, args.threshold, args.threads, args.parallel)
    for seed in seeds:
        print_seed(seed, results[seed], args.threshold)
    if len(seeds) > 1:
        ratio = hit_ratios(list(results.values()))
        if ratio:
            hits = sum(bool(r["robot_rl"]["hit"] and r["rsl_rl"]["hit"]) for r in results.values())
            print(f"\nall seeds where both reached {args.threshold:.0%} ({hits}/{len(seeds)}), summed: "
                  f"wall {ratio[0]:.2f}x, CPU {ratio[1]:.2f}x, env steps {ratio[2]:.2f}x (robot_rl / rsl_rl)")
        mean = {k: sum(r[k]["eval"]["success_rate"] for r in results.values()) / len(seeds)
                for k in ("robot_rl", "rsl_rl")}
        print(f"mean final eval success: robot_rl {mean['robot_rl']:.1%} vs rsl_rl {mean['rsl_rl']:.1%}")
    write_rows(args.out or RESULTS / "agents" / "ppo_vs_rsl_rl.json", result_rows(results), settings=settings,
               to_threshold_ratios=hit_ratios(list(results.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
