"""Per-update CPU time of every off-policy agent at batch 256 and 4096, next to stable-baselines3.

Each agent is built from its default config (``configs/agent/<agent>.yaml`` and the critic it selects), on a
HalfCheetah-sized problem (obs 17, action 6), with a replay buffer of random transitions; one
"update" is one gradient step of critic (and actor, when due): ``agent.update()`` with one update
owed (sampling + ``agent.learn``, under ``agent.amp``'s autocast). Where stable-baselines3 has the
same algorithm (SAC, TD3, DDPG), its
``model.train(gradient_steps=1, batch_size=B)`` is timed on the same sizes and the ratio printed.

    python benchmarks/agent_update_time.py [--updates 20] [--batches 256 4096] [--threads 1]

``--control-steps N`` instead times N whole control steps of SAC (``sac (amp=bf16)`` at batch 256) on
gymnasium's HalfCheetah-v5, the unit ``benchmarks/sac_vs_sb3.py`` repeats 100k times: ``agent.act`` + env
step + ``agent.observe`` + one update, after ``--warmup`` random steps (median CPU ms per step).

The rows go to ``--out`` (default ``docs/results/agents/agent_update_time.json``, or
``agent_control_step.json`` with ``--control-steps``), with the command, commit, load and machine.
"""


from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from _results import RESULTS, write_rows

from robot_rl.agents.base import EnvSpec, make_agent
from robot_rl.compose import compose

OBS_DIM, ACTION_DIM, FILL = 17, 6, 8192
AGENTS = {
    "sac": ["agent=sac"],
    "sac (amp=bf16)": ["agent=sac", "agent.amp=bf16"],
    "redq (sac, 10 critics)": ["agent=sac", "critic=redq", "agent.target_reduce=random_min", "agent.actor_reduce=mean"],
    "td3": ["agent=td3"],
    "td3 (amp=bf16)": ["agent=td3", "agent.amp=bf16"],
    "ddpg": ["agent=ddpg"],
    "tqc": ["agent=tqc"],
    "tqc (amp=bf16)": ["agent=tqc", "agent.amp=bf16"],
    "fast_td3": ["agent=fast_td3"],
    "fast_td3 (amp=bf16)": ["agent=fast_td3", "agent.amp=bf16"],
}
SB3_PEERS = {"sac": "SAC", "sac (amp=bf16)": "SAC", "td3": "TD3", "td3 (amp=bf16)": "TD3", "ddpg": "DDPG"}


def _spec() -> EnvSpec:
    return EnvSpec(num_envs=1, observation_dims={"policy": OBS_DIM}, action_dim=ACTION_DIM,
                   action_low=-torch.ones(ACTION_DIM), action_high=torch.ones(ACTION_DIM))


def _median_ms(fn, updates: int) -> float:
    """Median CPU time (``time.process_time``) of ``fn()`` in ms over ``updates`` calls, after 3 warm-up calls.

    CPU time rather than wall time: on a shared machine the wall time mostly measures the other load.
    """
    for _ in range(3):
        fn()
    times = []
    for _ in range(updates):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1000 * statistics.median(times)


def time_ours(overrides: list[str], batch: int, updates: int) -> float:
    """Median CPU ms per update of our agent."""
    cfg = compose([*overrides, f"agent.batch_size={batch}"])
    agent = make_agent(cfg.agent, cfg.critic, _spec())
    b = agent.buffer
    g = torch.Generator().manual_seed(0)
    b.obs["policy"].copy_(torch.randn(b.obs["policy"].shape, generator=g))
    b.next_obs["policy"].copy_(torch.randn(b.next_obs["policy"].shape, generator=g))
    b.action.uniform_(-1, 1, generator=g)
    b.reward.normal_(generator=g)
    b.size, b.position = min(FILL, b.capacity), min(FILL, b.capacity) % b.capacity

    agent.env_steps = agent.cfg.learning_starts

    def one_update() -> None:
        agent.update_credit = 1.0
        agent.update()

    return _median_ms(one_update, updates)


def time_sb3(name: str, batch: int, updates: int) -> float | None:
    """Median CPU ms per ``train(gradient_steps=1)`` of stable-baselines3's ``name``, or None if absent."""
    try:
        import gymnasium as gym
        import stable_baselines3 as sb3
        from stable_baselines3.common.logger import configure
    except ImportError:
        return None
    env = gym.make("Pendulum-v1")  # only for the spaces; resized below
    env.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    env.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    model = getattr(sb3, SB3_PEERS[name])("MlpPolicy", env, batch_size=batch, buffer_size=FILL, device="cpu",
                                         policy_kwargs={"net_arch": [256, 256]})
    model.set_logger(configure(None, []))
    rng = np.random.default_rng(0)
    rb = model.replay_buffer
    rb.observations[:] = rng.standard_normal(rb.observations.shape)
    rb.next_observations[:] = rng.standard_normal(rb.next_observations.shape)
    rb.actions[:] = rng.uniform(-1, 1, rb.actions.shape)
    rb.rewards[:] = rng.standard_normal(rb.rewards.shape)
    rb.full = True
    return _median_ms(lambda: model.train(gradient_steps=1, batch_size=batch), updates)


def time_control_step(steps: int, warmup: int) -> float:
    """Median CPU ms of one HalfCheetah-v5 control step of ``sac (amp=bf16)`` at batch 256 (1 env, UTD 1)."""
    import sim

    torch.manual_seed(0)
    env = sim.make_env("gym:HalfCheetah-v5", num_envs=1, seed=0)
    cfg = compose([*AGENTS["sac (amp=bf16)"], "agent.batch_size=256", f"agent.learning_starts={warmup}",
                   f"agent.buffer_size={warmup + steps + 100}"])
    agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(env))
    obs = env.reset(seed=0)

    def control_step() -> None:
        nonlocal obs
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        if agent.ready():
            agent.update()
        obs = step.obs

    for _ in range(warmup):
        control_step()
    return _median_ms(control_step, steps)


def main() -> None:
    """Print one table row per agent and batch size."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=20, help="timed updates per cell (median reported)")
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both libraries)")
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), help=f"subset of {list(AGENTS)}")
    parser.add_argument("--control-steps", type=int, default=0,
                        help="time this many HalfCheetah-v5 control steps of sac (amp=bf16) instead (0 = off)")
    parser.add_argument("--warmup", type=int, default=1000, help="random steps before --control-steps are timed")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file for the rows (default: docs/results/agents/agent_update_time.json, or "
                             "agent_control_step.json with --control-steps)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.control_steps:
        ms = time_control_step(args.control_steps, args.warmup)
        print(f"torch {torch.__version__}, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}: "
              f"sac (amp=bf16) HalfCheetah-v5 control step (act + env step + observe + update, batch 256), "
              f"median CPU of {args.control_steps} steps after {args.warmup} random: {ms:.3f} ms")
        write_rows(args.out or RESULTS / "agents" / "agent_control_step.json",
                   [{"agent": "sac (amp=bf16)", "steps": args.control_steps, "warmup": args.warmup,
                     "control_step_cpu_ms": ms}])
        return
    print(f"torch {torch.__version__}, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}, "
          f"obs {OBS_DIM}, action {ACTION_DIM}, median of {args.updates} updates")
    print("CPU ms per update (time.process_time, median)")
    print(f"{'agent':24s} {'batch':>6s} {'ours ms':>9s} {'sb3 ms':>9s} {'ours/sb3':>9s}")
    rows = []
    for name in args.agents:
        for batch in args.batches:
            ours = time_ours(AGENTS[name], batch, args.updates)
            peer = time_sb3(name, batch, args.updates) if name in SB3_PEERS else None
            peer_s = f"{peer:9.2f}" if peer is not None else f"{'-':>9s}"
            ratio = f"{ours / peer:9.2f}" if peer is not None else f"{'-':>9s}"
            print(f"{name:24s} {batch:6d} {ours:9.2f} {peer_s} {ratio}", flush=True)
            rows.append({"agent": name, "batch": batch, "updates": args.updates, "ours_cpu_ms": ours,
                         "sb3_cpu_ms": peer})
    write_rows(args.out or RESULTS / "agents" / "agent_update_time.json", rows)


if __name__ == "__main__":
    main()
