"""Our PPO vs rsl_rl's PPO (PyPI ``rsl-rl-lib``) on the same VecEnv, side by side in one process.

Both drive ``so101_reach`` with the same number of envs, steps per env, epochs, mini-batches,
network sizes and PPO hyperparameters (read from ``configs/agent/ppo.yaml`` + overrides). The
same recorder wraps the env for both, timing every finished episode, so "wall-clock to X%
success" is measured identically: the first moment the success rate of the last ``num_envs``
finished training episodes reaches the threshold. Each policy is then evaluated
deterministically with ``robot_rl.train.evaluation.evaluate``.

    python benchmarks/ppo_vs_rsl_rl.py                      # defaults of `robot-rl train`
    python benchmarks/ppo_vs_rsl_rl.py --steps 300000 --num-envs 64

Targets (issue 3): wall-clock to 90% <= 0.8x rsl_rl's; final success >= rsl_rl's.
Machine load matters: both runs share the CPU with whatever else runs; the load average is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim
from robot_rl.config import compose
from robot_rl.train.evaluation import evaluate
from robot_rl.train.on_policy_runner import OnPolicyRunner


class Recorder(sim.VecEnv):
    """Pass-through VecEnv recording ``(seconds since first step, window success)`` per finished batch."""

    def __init__(self, env: sim.VecEnv) -> None:
        self.env = env
        for name in ("num_envs", "device", "dt", "max_episode_steps", "action_dim", "action_low",
                     "action_high", "observation_dims", "reward_groups", "observation_layout", "robot"):
            setattr(self, name, getattr(env, name))
        self.window: deque[bool] = deque(maxlen=env.num_envs)
        self.curve: list[tuple[float, int, float]] = []
        self.steps = 0
        self.t0: float | None = None

    def reset(self, seed: int | None = None) -> sim.Obs:
        return self.env.reset(seed)

    def step(self, action: torch.Tensor) -> sim.Step:
        if self.t0 is None:
            self.t0 = time.monotonic()
        step = self.env.step(action)
        self.steps += self.num_envs
        done = step.terminated | step.truncated
        if bool(done.any()):
            self.window.extend(step.info["success"][done].tolist())
            self.curve.append((time.monotonic() - self.t0, self.steps, sum(self.window) / len(self.window)))
        return step

    def time_to(self, threshold: float) -> float | None:
        """Seconds until the window success first reached ``threshold`` (None if never)."""
        return next((t for t, _, s in self.curve if s >= threshold), None)


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
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": a.init_noise_std},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": list(c.hidden_dims), "activation": c.activation,
                   "obs_normalization": c.normalize_obs},
    }


def run_ours(cfg: Any, seed: int) -> tuple[Recorder, Any, float]:
    rec = Recorder(sim.make_env(cfg.task.name, num_envs=cfg.task.num_envs, seed=seed))
    runner = OnPolicyRunner(cfg, Path(os.environ.get("TMPDIR", "/tmp")) / f"ppo_bench_{os.getpid()}",
                            env_factory=lambda n, s: rec)
    start = time.monotonic()
    runner.learn(evaluate_and_export=False)
    return rec, runner.agent.policy(), time.monotonic() - start


def run_rsl(cfg: Any, seed: int) -> tuple[Recorder, Any, float]:
    from rsl_rl.runners import OnPolicyRunner as RslRunner

    torch.manual_seed(seed)
    rec = Recorder(sim.make_env(cfg.task.name, num_envs=cfg.task.num_envs, seed=seed))
    env = make_rsl_env(rec)
    runner = RslRunner(env, rsl_train_cfg(cfg), log_dir=None, device="cpu")
    iterations = -(-cfg.task.total_steps // (cfg.task.num_envs * cfg.agent.num_steps_per_env))
    start = time.monotonic()
    runner.learn(num_learning_iterations=iterations)
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
    env = sim.make_env(cfg.task.name, num_envs=n, seed=0)
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: task.total_steps)")
    p.add_argument("--num-envs", type=int, default=None, help="parallel envs (default: task.num_envs)")
    p.add_argument("--threshold", type=float, default=0.9, help="training success threshold (default 0.9)")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as sim=cpu)")
    p.add_argument("--update-time", action="store_true",
                   help="only report the CPU time of one update at batch 256 and 4096, ours vs rsl_rl")
    p.add_argument("overrides", nargs="*", help="Hydra overrides shared by both, e.g. agent.entropy_coef=0")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    over = [*args.overrides, "logger=none", "logger.progress=false", "eval_episodes=0", "export_formats=[]",
            f"seed={args.seed}"]
    if args.steps:
        over.append(f"task.total_steps={args.steps}")
    if args.num_envs:
        over.append(f"task.num_envs={args.num_envs}")
    cfg = compose(over)
    print(f"so101_reach, {cfg.task.num_envs} envs x {cfg.agent.num_steps_per_env} steps, "
          f"{cfg.task.total_steps:,} steps per run, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.update_time:
        for batch in (256, 4096):
            ours, theirs = update_times(cfg, batch)
            print(f"PPO update, batch {batch}: robot_rl {1000 * ours:.1f} ms, rsl_rl {1000 * theirs:.1f} ms "
                  f"CPU time (ratio {ours / theirs:.2f}x)")
        return 0
    rows = {}
    for name, fn in (("robot_rl", run_ours), ("rsl_rl", run_rsl)):
        rec, policy, wall = fn(cfg, args.seed)
        eval_env = sim.make_env(cfg.task.name, num_envs=min(args.eval_episodes, 64), seed=args.seed + 10_000)
        with torch.no_grad():
            summary = evaluate(policy, eval_env, args.eval_episodes, seed=args.seed + 10_000).summary()
        final_train = rec.curve[-1][2] if rec.curve else float('nan')
        rows[name] = (rec.time_to(args.threshold), wall, rec.steps / wall, final_train, summary)
        print(f"{name}: done in {wall:.0f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\n{'':10s} {'t to ' + format(args.threshold, '.0%'):>10s} {'wall s':>8s} {'steps/s':>9s} "
          f"{'train succ':>10s} {'eval succ [95% CI]':>22s}")
    for name, (t_hit, wall, sps, train_s, e) in rows.items():
        hit = "never" if t_hit is None else f"{t_hit:.0f} s"
        lo, hi = e["success_ci95"]
        print(f"{name:10s} {hit:>10s} {wall:8.0f} {sps:9.0f} {train_s:10.0%} "
              f"{e['success_rate']:6.0%} [{lo:.0%}, {hi:.0%}]")
    ours, theirs = rows["robot_rl"], rows["rsl_rl"]
    ratio = "n/a (a run never reached it)" if None in (ours[0], theirs[0]) else f"{ours[0] / theirs[0]:.2f}x"
    print(f"\nwall-clock to {args.threshold:.0%}: robot_rl / rsl_rl = {ratio} (target <= 0.8x)")
    print(f"throughput: robot_rl / rsl_rl = {ours[2] / theirs[2]:.2f}x")
    print(f"final eval success: robot_rl {ours[4]['success_rate']:.0%} vs rsl_rl "
          f"{theirs[4]['success_rate']:.0%} (target >=)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
