"""``robot-rl sim``: step a task with random or zero actions and report its throughput."""

from __future__ import annotations

import argparse
import time

from robot_rl.commands._args import command_parser, integer, positive, seed

SUMMARY = "Step a simulated task with random/zero actions; print env-steps/s (and write a video)"


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "sim",
        "Step a batched simulation task with random or zero actions, with a progress bar, "
                    "and print its throughput in env-steps/s. Use it to check an install, a new robot "
                    "or task, and how fast this machine simulates.",
        "examples:\n  robot-rl sim --task so101_reach\n"
               "  robot-rl sim --task g1_walk --num-envs 256 --steps 500 --actions zero\n"
               "  robot-rl sim --task so101_reach --video outputs/so101_reach.mp4\n"
               "  robot-rl sim --list",
    )
    parser.add_argument("--task", default="so101_reach", help="task name (default: so101_reach; see --list)")
    parser.add_argument("--num-envs", type=positive, default=64, help="parallel envs (default: 64)")
    parser.add_argument("--steps", type=positive, default=400, help="control steps per env (default: 400)")
    parser.add_argument("--actions", choices=("random", "zero"), default="random",
                        help="uniform random actions in the action box, or zeros (hold the default pose)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the env and the random actions")
    parser.add_argument("--threads", type=integer(minimum=0), default=0, help="physics threads (default 0: all CPUs)")
    parser.add_argument("--video", default=None, metavar="PATH.mp4",
                        help="also render env 0 offscreen to this mp4 (needs EGL or OSMesa without a display)")
    parser.add_argument("--list", action="store_true", help="list the registered tasks and exit")
    return parser


def main(argv: list[str]) -> int:
    """Run the simulation demo; returns the process exit code."""
    args = _parser().parse_args(argv)
    import torch
    from tqdm import tqdm

    import sim
    from robot_rl.errors import InputError

    torch.set_num_threads(1)  # the env's tensors are tiny; intra-op threads only contend with physics
    if args.list:
        print("\n".join(sim.list_tasks()))
        return 0
    if args.task not in sim.list_tasks():
        raise InputError("unknown task", key="--task", value=args.task, fix=f"use one of {', '.join(sim.list_tasks())}")
    env = sim.make_env(args.task, num_envs=args.num_envs, seed=args.seed, nthread=args.threads)
    generator = torch.Generator().manual_seed(args.seed)
    env.reset(seed=args.seed)
    low, high = env.action_low.cpu(), env.action_high.cpu()
    frames = []
    episodes, successes, returns = 0, 0.0, 0.0
    start = time.perf_counter()
    with tqdm(total=args.steps, desc=f"{args.task} x{args.num_envs}", unit="step") as bar:
        for _ in range(args.steps):
            if args.actions == "zero":
                action = torch.zeros(args.num_envs, env.action_dim)
            else:
                u = torch.rand(args.num_envs, env.action_dim, generator=generator)
                action = low + (high - low) * u
            step = env.step(action)
            done = int(step.done.sum())
            if done and step.info["log"]:
                log = step.info["log"]
                episodes += done
                returns += log["episode/return"] * done
                successes += log.get("episode/success", 0.0) * done
            if args.video:
                frames.append(env.render(0, 480, 360))
            bar.update(1)
            elapsed = time.perf_counter() - start
            bar.set_postfix(env_steps_s=f"{bar.n * args.num_envs / max(elapsed, 1e-9):,.0f}", refresh=False)
    elapsed = time.perf_counter() - start
    rate = args.steps * args.num_envs / elapsed
    sim_speed = rate * env.dt
    print(f"{args.task}: {args.num_envs} envs x {args.steps} steps in {elapsed:.2f} s = {rate:,.0f} env-steps/s "
          f"({sim_speed:,.0f}x real time; control dt {env.dt * 1000:.0f} ms)"
          + (" incl. rendering" if args.video else ""))
    if episodes:
        print(f"episodes finished: {episodes}, mean return {returns / episodes:.3f}"
              + (f", success rate {successes / episodes:.1%}" if "episode/success" in step.info["log"] else ""))
    if args.video:
        from sim.render import write_mp4

        print(f"video: {write_mp4(frames, args.video, fps=1.0 / env.dt)}")
    env.close()
    return 0
