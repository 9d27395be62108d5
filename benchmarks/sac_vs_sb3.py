"""Our SAC (fp32 and bf16) vs stable-baselines3's SAC and sbx's (JAX) SAC on HalfCheetah-v5, side by side.

Every library drives gymnasium's HalfCheetah-v5 (ours through ``sim.make_env("gym:HalfCheetah-v5")``, the
VecEnv adapter over the same gymnasium env) with SB3's SAC defaults: lr 3e-4 (actor, critics,
temperature), batch 256, buffer 1e6, tau 0.005, gamma 0.99, one gradient step per env step,
automatic temperature from 1.0 with target entropy -6, a [256, 256] ReLU actor and two [256, 256] ReLU
critics, and ``--learning-starts`` random steps (rl-zoo uses 10000 for HalfCheetah). The arms
(``--libraries``, all four by default, run in the order given):

- ``ours-fp32`` and ``ours-bf16``: our SAC with ``agent.amp=none`` / ``agent.amp=bf16``;
- ``sb3``: ``stable_baselines3.SAC`` (in the ``[dev]`` extra);
- ``sbx``: ``sbx.SAC``, the JAX SAC by SB3's authors, run as its users run it (``from sbx import SAC``,
  ``learn``; its jit compilation happens inside the training clock), with the same keyword arguments as
  SB3. It lives in the ``[peers]`` extra (``pip install -e ".[peers]"``; it pulls jax, jaxlib, flax and
  optax). Before timing, the script builds both models and prints every setting in which sbx's differs
  from SB3's (none with sbx 0.28) and the differences in code that no setting reaches (weight
  initialisation, update order).

Threads: ``--threads`` (default 1) is torch's intra-op thread count in every arm and, for sbx, XLA's CPU
thread pool: before anything imports jax the script sets ``NPROC=<threads>`` (the size XLA gives its CPU
client's pool), ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` (with one thread: Eigen's matmuls on
the calling thread) and ``JAX_PLATFORMS=cpu`` (sbx on the CPU even where a GPU is visible, like the others).

Reported per seed and arm: training wall-clock (collection + updates, evaluation excluded), its CPU
seconds, wall milliseconds per env step and the mean deterministic return over ``--eval-episodes`` full
1000-step episodes; then the seed means and one table of ratios ours/peer (ours-fp32/sbx, ours-bf16/sbx,
ours-fp32/sb3, ours-bf16/sb3) with the issues' targets beside them: our wall <= 0.7x sbx's and <= 0.5x
SB3's at equal return, where "equal" means our mean return is at least the peer's minus the standard
deviation of the peer's seed returns (the peer's mean itself with one seed).

Beside them, the arithmetic floor (:mod:`_matmul_floor`): before training, the script times the matrix products
every SAC update of these networks must do (291M multiply-adds; one ``torch.mm`` each, float32 and bfloat16, at
``--threads``) and prints, per ours arm, that floor times the number of updates over the peer's wall: the best
ratio the arm could reach if everything but those products (env steps, acting, autograd, optimisers) were free.
A target below it is out of reach on this core with torch's kernels at that precision.

The issue's target is 100k steps x 3 seeds (the default; hours on CPU). ``--steps`` shortens it:

    python benchmarks/sac_vs_sb3.py --steps 3000 --learning-starts 1000 --seeds 0

``--parallel`` runs the chosen arms at the same time, one process per arm, each going through the seeds
in order, so all arms see the same machine load; the table is printed when all are done. It needs
(arms x threads) cores to give each arm its threads (4 with the default arms); with fewer the arms share
the cores, the script says so, and their CPU seconds are the cleaner comparison. On a 2-core machine run
pairs, e.g. ``--parallel --libraries ours-bf16 sbx``.

The rows (one per seed and arm: training wall and CPU seconds, final return) and the summary go to
``--out`` (default ``docs/results/agents/sac_vs_sb3.json``, with the command, commit, load and machine).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _matmul_floor import floor_ms, multiply_adds, sac_update_products
from _results import RESULTS, write_rows

from robot_rl.agents.base import Agent
from robot_rl.errors import InputError

SB3_DEFAULTS = {"learning_rate": 3e-4, "batch_size": 256, "buffer_size": 1_000_000, "tau": 0.005, "gamma": 0.99}
LIBRARIES = ("ours-fp32", "ours-bf16", "sb3", "sbx")
OURS_AMP = {"ours-fp32": "none", "ours-bf16": "bf16"}
PEER_MODULES = {"sb3": "stable_baselines3", "sbx": "sbx"}
INSTALL = {"sb3": 'pip install -e ".[dev]"', "sbx": 'pip install -e ".[peers]"'}
WALL_TARGETS = {"sbx": 0.7, "sb3": 0.5}
"""The issues' targets: our training wall <= this times the peer's, at equal return."""
SBX_CODE_DIFFERENCES = (
    "weights: flax's Dense init (lecun-normal kernels, zero biases) vs torch's Linear init (uniform +-1/sqrt(fan_in))",
    "update order: sbx updates critics, target critics, actor, then temperature; SB3 temperature, critics, actor, "
    "then target critics (both use the pre-update temperature in the critic target)",
    "random streams: jax's PRNG (sbx) vs torch's (SB3), so the same seed gives different runs",
)

Run = tuple[float, float, float]
"""One seed of one arm: (training wall s, training CPU s, mean deterministic return)."""


class Clock:
    """Training wall/CPU seconds since :meth:`start`, with evaluation time excluded."""

    def start(self) -> None:
        """Start counting."""
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        """(wall, CPU) seconds of training so far."""
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0

    def exclude(self, fn: Callable[[], float]) -> float:
        """Run ``fn`` (an evaluation) without counting its time; returns its result."""
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        self.wall0 += time.perf_counter() - wall
        self.cpu0 += time.process_time() - cpu
        return result


def jax_thread_env(threads: int, xla_flags: str = "") -> dict[str, str]:
    """Environment variables that hold XLA's CPU client to ``threads`` threads; set them before jax is imported.

    ``xla_flags`` is the caller's ``XLA_FLAGS`` (kept, the Eigen flag appended with one thread)."""
    flags = f"{xla_flags} --xla_cpu_multi_thread_eigen=false".strip() if threads == 1 else xla_flags
    return {"NPROC": str(threads), "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}


def check_installed(libraries: list[str]) -> None:
    """Raise :class:`InputError`, naming the install command, for a chosen peer whose package is absent."""
    for name in libraries:
        module = PEER_MODULES.get(name)
        if module is not None and importlib.util.find_spec(module) is None:
            raise InputError(f"{name} is not installed (module {module})", key="--libraries", value=name,
                             fix=f"{INSTALL[name]}, or leave {name} out of --libraries")


def report(name: str, seed: int, step: int, clock: Clock, ret: float) -> None:
    """One progress line: training time so far and the deterministic return at ``step``."""
    wall, cpu = clock.read()
    print(f"  seed {seed} {name} step {step}: train wall {wall:.1f} s, train CPU {cpu:.1f} s, return {ret:.1f}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


def run_ours(steps: int, seed: int, learning_starts: int, eval_episodes: int, amp: str,
             eval_every: int) -> Run:
    """Train our SAC with ``agent.amp=amp``; returns (training wall s, training CPU s, mean deterministic return)."""
    import sim
    from robot_rl.agents.base import EnvSpec, make_agent
    from robot_rl.compose import compose

    torch.manual_seed(seed)
    cfg = compose([
        "agent=sac", "critic=ensemble", "critic.hidden_dims=[256,256]", "critic.activation=relu",
        f"agent.learning_starts={learning_starts}", f"agent.batch_size={SB3_DEFAULTS['batch_size']}",
        f"agent.buffer_size={min(SB3_DEFAULTS['buffer_size'], steps)}", f"agent.tau={SB3_DEFAULTS['tau']}",
        f"agent.gamma={SB3_DEFAULTS['gamma']}", f"agent.actor_lr={SB3_DEFAULTS['learning_rate']}",
        f"agent.critic_lr={SB3_DEFAULTS['learning_rate']}", f"agent.alpha_lr={SB3_DEFAULTS['learning_rate']}",
        "agent.utd_ratio=1.0", "agent.init_alpha=1.0", "agent.actor_hidden_dims=[256,256]",
        "agent.activation=relu", "agent.normalize_obs=false", f"agent.amp={amp}",
    ])
    env = sim.make_env("gym:HalfCheetah-v5", num_envs=1, seed=seed)
    agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(env))
    obs = env.reset(seed=seed)
    clock = Clock()
    clock.start()
    for i in range(1, steps + 1):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs
        if agent.ready():
            agent.update()
        if eval_every and i % eval_every == 0 and i < steps:
            ret = clock.exclude(lambda: evaluate_ours(agent, seed + 1000, eval_episodes))
            report(f"ours amp={amp}", seed, i, clock, ret)
    wall, cpu = clock.read()
    return wall, cpu, evaluate_ours(agent, seed + 1000, eval_episodes)


def evaluate_ours(agent: Agent, seed: int, episodes: int) -> float:
    """Mean return of ``episodes`` deterministic episodes run side by side."""
    import sim

    env = sim.make_env("gym:HalfCheetah-v5", num_envs=episodes, seed=seed)
    obs = env.reset(seed=seed)
    total = torch.zeros(episodes)
    finished = torch.zeros(episodes, dtype=torch.bool)
    while not bool(finished.all()):
        step = env.step(agent.act(obs, deterministic=True))
        total += step.reward * ~finished
        finished |= step.terminated | step.truncated
        obs = step.obs
    return float(total.mean())


def make_peer(name: str, env: Any, steps: int, seed: int, learning_starts: int) -> Any:
    """``SAC("MlpPolicy", env, ...)`` of peer ``name`` (``sb3`` or ``sbx``), both given the same keywords: SB3's
    defaults spelled out (:data:`SB3_DEFAULTS`, one gradient step per env step, automatic temperature from 1.0
    with the default target entropy, [256, 256] networks), the buffer capped at ``steps``, on the CPU."""
    if name == "sb3":
        from stable_baselines3 import SAC
    else:
        from sbx import SAC
    return SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, device="cpu", train_freq=1,
               gradient_steps=1, ent_coef="auto", target_entropy="auto", policy_kwargs={"net_arch": [256, 256]},
               **{**SB3_DEFAULTS, "buffer_size": min(SB3_DEFAULTS["buffer_size"], steps)})


def peer_settings(name: str, model: Any) -> dict[str, object]:
    """The SAC settings of a built SB3 or sbx model, read back from the model (so defaults show). The two
    intervals with a knob on one side only are that side's value vs the other's fixed behaviour: SB3 updates the
    actor at every gradient step, sbx the target critics."""
    common = {"learning_rate": model.learning_rate, "batch_size": model.batch_size, "buffer_size": model.buffer_size,
              "tau": model.tau, "gamma": model.gamma, "train_freq": model.train_freq.frequency,
              "gradient_steps": model.gradient_steps, "learning_starts": model.learning_starts,
              "target_entropy": float(model.target_entropy)}
    policy = model.policy
    if name == "sb3":
        return common | {
            "actor_net": list(policy.actor_kwargs["net_arch"]), "critic_net": list(policy.critic_kwargs["net_arch"]),
            "n_critics": policy.critic_kwargs["n_critics"], "activation": policy.activation_fn.__name__.lower(),
            "ent_coef_init": float(torch.exp(model.log_ent_coef.detach())), "policy_delay": 1,
            "target_update_interval": model.target_update_interval}
    return common | {
        "actor_net": list(policy.net_arch_pi), "critic_net": list(policy.net_arch_qf), "n_critics": policy.n_critics,
        "activation": policy.activation_fn.__name__.lower(), "ent_coef_init": float(model.ent_coef.ent_coef_init),
        "policy_delay": model.policy_delay, "target_update_interval": 1}


def setting_differences(sbx: dict[str, object], sb3: dict[str, object]) -> list[str]:
    """``"<key>: sbx <value> vs sb3 <value>"`` for every setting the two models do not share."""
    return [f"{key}: sbx {sbx.get(key)} vs sb3 {sb3.get(key)}" for key in sorted(sbx.keys() | sb3.keys())
            if sbx.get(key) != sb3.get(key)]


def describe_sbx(steps: int, learning_starts: int) -> str:
    """What differs between the sbx and SB3 arms: settings read from both built models, then code differences."""
    import gymnasium as gym

    env = gym.make("HalfCheetah-v5")
    settings = {name: peer_settings(name, make_peer(name, env, steps, 0, learning_starts)) for name in ("sbx", "sb3")}
    differences = setting_differences(settings["sbx"], settings["sb3"])
    lines = [f"sbx vs SB3 settings: {'; '.join(differences) if differences else 'identical'}",
             *(f"sbx vs SB3 code: {text}" for text in SBX_CODE_DIFFERENCES)]
    return "\n".join(lines)


def run_peer(name: str, steps: int, seed: int, learning_starts: int, eval_episodes: int, eval_every: int) -> Run:
    """Train SB3's or sbx's SAC (``name``); returns (training wall s, training CPU s, mean deterministic return)."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    env = gym.make("HalfCheetah-v5")
    model = make_peer(name, env, steps, seed, learning_starts)
    eval_env = gym.make("HalfCheetah-v5")

    def evaluate() -> float:
        eval_env.reset(seed=seed + 1000)
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes, deterministic=True, warn=False)
        return float(mean)

    clock = Clock()

    class Progress(BaseCallback):
        """Evaluates every ``eval_every`` steps, outside the training clock."""

        def _on_step(self) -> bool:
            if eval_every and self.num_timesteps % eval_every == 0 and self.num_timesteps < steps:
                report(name, seed, self.num_timesteps, clock, clock.exclude(evaluate))
            return True

    clock.start()
    model.learn(total_timesteps=steps, callback=Progress())
    wall, cpu = clock.read()
    return wall, cpu, evaluate()


def run_library(name: str, seeds: list[int], args: argparse.Namespace) -> dict[int, Run]:
    """Every seed of one arm in order; ``{seed: (wall, CPU, return)}`` (one ``--parallel`` worker, or one seed
    at a time in the sequential mode). jax's thread variables are already in the environment (set by main)."""
    torch.set_num_threads(args.threads)
    done = {}
    for seed in seeds:
        if name in OURS_AMP:
            done[seed] = run_ours(args.steps, seed, args.learning_starts, args.eval_episodes, OURS_AMP[name],
                                  args.eval_every)
        else:
            done[seed] = run_peer(name, args.steps, seed, args.learning_starts, args.eval_episodes, args.eval_every)
        wall, cpu, ret = done[seed]
        print(f"  seed {seed} {name} step {args.steps} (final): train wall {wall:.1f} s, train CPU {cpu:.1f} s, "
              f"return {ret:.1f}, load average {os.getloadavg()[0]:.1f}", flush=True)
    return done


def summary(results: dict[str, dict[int, Run]], floor_s: dict[str, float] | None = None) -> dict[str, Any]:
    """Seed statistics and the ours/peer comparisons of ``{arm: {seed: (wall, CPU, return)}}``.

    Returns ``means`` (``{arm: (wall, CPU, return)}`` seed means), ``return_std`` (``{arm: sample standard
    deviation of the seed returns}``, 0 with one seed) and ``ratios``: for every ours arm and peer both present,
    ``{"ours-fp32/sbx": {"wall": ours/peer mean wall, "cpu": ours/peer mean CPU, "return_diff": ours - peer mean
    return, "equal_return": ours mean >= peer mean - peer std, "target": the wall target, "met": wall <= target
    and equal_return}}``, plus ``"floor"``: ``floor_s[ours]`` (the arm's arithmetic floor in seconds,
    :func:`arithmetic_floor`) over the peer's mean wall, where ``floor_s`` is given."""
    means = {name: tuple(statistics.mean(r[i] for r in done.values()) for i in range(3))
             for name, done in results.items()}
    std = {name: statistics.stdev(r[2] for r in done.values()) if len(done) > 1 else 0.0
           for name, done in results.items()}
    ratios = {}
    for peer, target in WALL_TARGETS.items():
        for ours in OURS_AMP:
            if ours in means and peer in means:
                (ow, oc, oret), (pw, pc, pret) = means[ours], means[peer]
                equal = oret >= pret - std[peer]
                ratios[f"{ours}/{peer}"] = {"wall": ow / pw, "cpu": oc / pc, "return_diff": oret - pret,
                                            "equal_return": equal, "target": target, "met": ow / pw <= target and equal}
                if floor_s is not None:
                    ratios[f"{ours}/{peer}"]["floor"] = floor_s[ours] / pw
    return {"means": means, "return_std": std, "ratios": ratios}


def seed_rows(results: dict[str, dict[int, Run]], means: dict[str, Run], steps: int) -> list[str]:
    """The per-seed table, then the seed ``means``: ``seed arm wall CPU ms/step return`` (ms/step = wall / steps)."""
    lines = [f"{'seed':>6s} {'arm':>10s} {'wall s':>9s} {'CPU s':>9s} {'ms/step':>8s} {'return':>9s}"]
    seeds = sorted({seed for done in results.values() for seed in done})
    cells = [(str(seed), name, done[seed]) for seed in seeds for name, done in results.items() if seed in done]
    for label, name, (wall, cpu, ret) in cells + [("mean", name, means[name]) for name in results]:
        lines.append(f"{label:>6s} {name:>10s} {wall:9.1f} {cpu:9.1f} {1000 * wall / steps:8.2f} {ret:9.1f}")
    return lines


def ratio_rows(out: dict[str, Any]) -> list[str]:
    """One table of every ours/peer comparison in ``summary(...)``: wall and CPU ratios, return difference,
    the wall target, whether it is met at equal return, and the arithmetic floor's ratio (``-`` without one)."""
    lines = [f"{'ours/peer':>15s} {'wall':>6s} {'CPU':>6s} {'return diff':>12s} {'peer std':>9s} {'target':>8s} "
             f"{'met':>4s} {'floor':>6s}"]
    for pair, r in out["ratios"].items():
        peer = pair.split("/")[1]
        floor = format(r["floor"], "6.2f") if "floor" in r else f"{'-':>6s}"
        lines.append(f"{pair:>15s} {r['wall']:6.2f} {r['cpu']:6.2f} {r['return_diff']:+12.1f} "
                     f"{out['return_std'][peer]:9.1f} {'<= ' + format(r['target'], '.1f'):>8s} "
                     f"{'yes' if r['met'] else 'no':>4s} {floor}")
    return lines


def arithmetic_floor(steps: int, learning_starts: int) -> dict[str, Any]:
    """Time the matrix products of one SAC update on HalfCheetah-v5 (:func:`_matmul_floor.sac_update_products`:
    SB3's [256, 256] networks, two critics, batch 256) at float32 and bfloat16; returns ``{"products",
    "multiply_adds", "ms": {arm: ms per update}, "s": {arm: ms x (steps - learning_starts) updates / 1000}}``."""
    import gymnasium as gym

    env = gym.make("HalfCheetah-v5")
    obs_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    products = sac_update_products(obs_dim, action_dim, [256, 256], 2, SB3_DEFAULTS["batch_size"])
    dtypes = {"ours-fp32": torch.float32, "ours-bf16": torch.bfloat16}
    ms = {arm: floor_ms(products, dtype) for arm, dtype in dtypes.items()}
    updates = steps - learning_starts
    return {"products": len(products), "multiply_adds": multiply_adds(products), "ms": ms,
            "s": {arm: t * updates / 1000 for arm, t in ms.items()}}


def main() -> None:
    """Run every chosen arm for every seed and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (target: 100000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learning-starts", type=int, default=10_000, help="random steps before learning")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic 1000-step episodes")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads of every arm and XLA's CPU threads of sbx (default 1)")
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES), metavar="ARM",
                        help=f"arms to run, in this order within each seed (default: all of {', '.join(LIBRARIES)})")
    parser.add_argument("--eval-every", type=int, default=20_000,
                        help="also evaluate every this many steps, printing a progress line (0 = only at the end)")
    parser.add_argument("--parallel", action="store_true",
                        help="run the arms at the same time, one process each (seeds in order in each)")
    parser.add_argument("--out", type=Path, default=RESULTS / "agents" / "sac_vs_sb3.json",
                        help="JSON file for the rows (default: %(default)s)")
    args = parser.parse_args()
    libraries = list(dict.fromkeys(args.libraries))
    if args.learning_starts >= args.steps:
        parser.error(f"--learning-starts {args.learning_starts} must be < --steps {args.steps}")
    try:
        check_installed(libraries)
    except InputError as err:
        parser.error(str(err))
    os.environ.update(jax_thread_env(args.threads, os.environ.get("XLA_FLAGS", "")))
    torch.set_num_threads(args.threads)
    print(f"HalfCheetah-v5, {args.steps} steps, seeds {args.seeds}, learning_starts {args.learning_starts}, arms "
          f"{' '.join(libraries)}, {args.threads} thread(s) (torch; sbx: NPROC={os.environ['NPROC']}, XLA_FLAGS="
          f"{os.environ['XLA_FLAGS']!r}), load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if "sbx" in libraries:
        print(describe_sbx(args.steps, args.learning_starts))
    floor = arithmetic_floor(args.steps, args.learning_starts)
    print(f"arithmetic floor: one update multiplies {floor['products']} matrix pairs "
          f"({floor['multiply_adds'] / 1e6:.0f}M multiply-adds); alone (one torch.mm each) they take "
          f"{floor['ms']['ours-fp32']:.2f} ms in float32 and {floor['ms']['ours-bf16']:.2f} ms in bfloat16 per update, "
          f"{floor['s']['ours-fp32']:.0f} s / {floor['s']['ours-bf16']:.0f} s over the run's "
          f"{args.steps - args.learning_starts} updates (env steps and all else on top)")
    print("wall and CPU seconds of training (evaluation excluded); CPU time is less sensitive to other load")
    results: dict[str, dict[int, Run]] = {}
    if args.parallel:
        if len(libraries) * args.threads > (os.cpu_count() or 1):
            print(f"--parallel: {len(libraries)} arms x {args.threads} thread(s) on {os.cpu_count()} CPUs: the arms "
                  "share cores, so every wall is inflated; compare CPU seconds, or run fewer --libraries at once")
        with concurrent.futures.ProcessPoolExecutor(len(libraries),
                                                    mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(run_library, name, args.seeds, args) for name in libraries}
            results = {name: f.result() for name, f in futures.items()}
    else:
        for seed in args.seeds:
            for name in libraries:
                results.setdefault(name, {})[seed] = run_library(name, [seed], args)[seed]
    rows = [{"seed": seed, "library": name, "train_wall_s": wall, "train_cpu_s": cpu, "return": ret}
            for name, done in results.items() for seed, (wall, cpu, ret) in done.items()]
    out = summary(results, floor["s"])
    write_rows(args.out, rows, settings={k: str(v) for k, v in vars(args).items()}, summary=out | {"floor": floor})
    print("\n".join(seed_rows(results, out["means"], args.steps)))
    if out["ratios"]:
        print("ours/peer of the seed means; target: our wall <= target x the peer's at equal return (our mean "
              "return >= the peer's minus its seed std); floor: the arm's arithmetic floor over the peer's wall")
        print("\n".join(ratio_rows(out)))


if __name__ == "__main__":
    main()
