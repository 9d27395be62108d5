"""``robot-rl eval``: evaluate a run's checkpoint or an exported policy artifact in simulation."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands._args import add_episode_args, command_parser, integer, number, positive

SUMMARY = "Evaluate a run or a policy artifact: return, success, length with 95% intervals (+ mp4)"


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        "eval",
        "Run N episodes of the policy as deployed (deterministic: the actor's mean, a VLA's zero noise; "
        "--noise-scale samples a VLA instead) and report return, success rate and episode length "
        "with 95% confidence intervals (normal for means, Wilson for the success rate).",
        "examples:\n  robot-rl eval outputs/2026-11-30/11-02-03 --episodes 200\n"
        "  robot-rl eval outputs/2026-11-30/11-02-03/policy --video\n\n"
        "A run directory is evaluated from its latest checkpoint with torch; an artifact directory "
        "(policy.yaml + policy.onnx) with onnxruntime, on its task's env. On a position-controlled task the "
        "summary's commands_beyond_safety is the share of steps whose joint targets the policy node's safety layer "
        "would change (past a joint limit or robot.yaml's max_step_change; exact with --rate-limit or a run trained "
        "under the limit): near 1, the safety layer, not the policy, would move the robot.",
    )
    p.add_argument("path", type=Path, help="run directory (config.yaml) or policy artifact (policy.yaml)")
    add_episode_args(p, episodes=100, envs_cap=64, what="episodes to run")
    p.add_argument("--video", nargs="?", const="", default=None, metavar="MP4",
                   help="write an mp4 of the first episode (default <path>/eval.mp4)")
    p.add_argument("--task", default=None, help="artifact only: task to run on (default: the artifact's)")
    p.add_argument("--execute-len", type=positive, default=None,
                   help="artifact only: play each chunk open loop for this many steps before the next inference "
                        "(1: re-plan every step, the chunk's first action) instead of policy.yaml's chunk_execution")
    p.add_argument("--latency-ms", type=number(0.0, 1000.0), default=None,
                   help="artifact only: every command reaches the motors this many ms late (MuJoCo actuator "
                        "delay, replacing the task's own delay range): evaluate at the latency your ROS 2 loop adds "
                        "(sim2sim's --latency-ms plus the policy node's compute, printed by sim2sim) before you deploy")
    p.add_argument("--image-lag", type=integer(0, 100), default=0, metavar="STEPS",
                   help="VLA artifact only: every inference sees camera images this many control steps older than "
                        "the joint positions, as the ROS 2 policy node sees its cameras' latest frames (sim2sim "
                        "renders after publishing the joint states: 1 step), before you deploy")
    p.add_argument("--rate-limit", action="store_true",
                   help="artifact only: every command moves each joint at most robot.yaml's safety.max_step_change "
                        "from the last one, as the policy node's safety layer does; with --latency-ms and "
                        "--image-lag the loop a ROS 2 deployment runs, in the batched sim")
    p.add_argument("--wrong-instruction", action="store_true",
                   help="a VLA run or artifact is evaluated twice on the same episode seeds, told the named target's "
                        "instruction and then another target's (same paraphrase, target shifted by one) while the "
                        "env scores the named one; the second result is under 'wrong_instruction'")
    p.add_argument("--noise-scale", type=number(0.0, 10.0), default=0.0, metavar="S",
                   help="VLA run only: decode each chunk from initial noise N(0, S^2 I) (drawn from --seed) instead of "
                        "the deployed policy's zero noise: how the sampled policy does, the one RL post-training "
                        "collects with (S=1: the flow's own N(0, I); agent=vla_ppo's agent.initial_noise_scale)")
    return p


def main(argv: list[str]) -> int:
    """Parse ``argv``, evaluate, print a JSON summary; 2 on bad input."""
    args = _parser().parse_args(argv)
    num_envs = args.num_envs or min(args.episodes, 64)
    video = None if args.video is None else Path(args.video or args.path / "eval.mp4")
    if (args.path / "policy.yaml").is_file():
        from robot_rl.train.artifact_eval import evaluate_artifact

        latency_s = None if args.latency_ms is None else args.latency_ms / 1e3
        if args.noise_scale > 0:
            print(f"robot-rl eval: --noise-scale evaluates a VLA run; {args.path} is an artifact (it plays zero "
                  f"noise, as deployed). Fix: pass the run directory it was exported from", file=sys.stderr)
            return 2
        summary = evaluate_artifact(args.path, args.episodes, num_envs, args.seed, video, args.task, args.execute_len,
                                    instruction_shift=int(args.wrong_instruction), latency_s=latency_s,
                                    image_lag=args.image_lag, rate_limit=args.rate_limit)
    elif (args.path / "config.yaml").is_file():
        artifact_flags = {"--task": args.task is not None, "--execute-len": args.execute_len is not None,
                          "--latency-ms": args.latency_ms is not None, "--image-lag": args.image_lag > 0,
                          "--rate-limit": args.rate_limit}
        flag = next((name for name, given in artifact_flags.items() if given), None)
        if flag is not None:
            print(f"robot-rl eval: {flag} evaluates a policy artifact; {args.path} is a run. Fix: export it "
                  f"(robot-rl export {args.path}) and pass {args.path / 'policy'}", file=sys.stderr)
            return 2
        from robot_rl.train.evaluation import evaluate, playable
        from robot_rl.train.run_loading import open_run

        runner = open_run(args.path, num_envs=num_envs)
        env = runner.env_factory(num_envs, args.seed)
        player = playable(runner.agent, noise_scale=args.noise_scale, seed=args.seed)
        summary = evaluate(player, env, args.episodes, args.seed, video, on_done=player.reset).summary()
        if args.noise_scale > 0:
            summary["noise_scale"] = args.noise_scale
        summary["env_steps"] = runner.env_steps
        if args.wrong_instruction:
            wrong = playable(runner.agent, instruction_shift=1, noise_scale=args.noise_scale, seed=args.seed)
            summary["wrong_instruction"] = evaluate(wrong, env, args.episodes, args.seed,
                                                    on_done=wrong.reset).summary()
    else:
        print(f"robot-rl eval: {args.path} has neither config.yaml (a run) nor policy.yaml (an artifact)",
              file=sys.stderr)
        return 2
    if video is not None:
        summary["video"] = str(video)
    print(json.dumps(summary, indent=2))
    return 0
