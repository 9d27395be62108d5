"""``robot-rl critic-report``: how good is a run's critic? Predicted values against realised returns."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robot_rl.commands._args import add_episode_args, command_parser

SUMMARY = "Critic diagnostics of a run: value vs realised return, bias over training, disagreement (PNG + md)"


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        "critic-report",
        "Run deterministic evaluation episodes of a run's policy and compare what its critic "
        "predicted at every step (V(s), or Q(s, a) of the action taken) with the discounted return that "
        "was realised afterwards. Writes PNG figures and report.md into <run>/critic_report/: value vs "
        "return along episodes, a scatter, overestimation bias at every kept checkpoint, ensemble "
        "disagreement (critics with several members) and per-reward-group panels (critic=multi with "
        "agent.per_group_values=true).",
        "examples:\n  robot-rl critic-report outputs/2026-11-30/11-02-03\n"
        "  robot-rl critic-report outputs/2026-11-30/11-02-03 --episodes 40 --latest-only\n\n"
        "Bias > 0 means the critic overestimates. Episodes cut by the time limit have no realised tail: "
        "see --tail.",
    )
    p.add_argument("run", type=Path, help="run directory (holds config.yaml and checkpoints/)")
    add_episode_args(p, episodes=20, envs_cap=16, what="episodes at the latest checkpoint")
    p.add_argument("--tail", choices=("bootstrap", "exclude"), default="bootstrap",
                   help="episodes cut by the time limit: complete their return with the critic's value of the "
                   "final observation (bootstrap, default) or leave out steps whose missing tail weighs > 5%% "
                   "(exclude; needs episodes longer than the discount horizon)")
    p.add_argument("--latest-only", action="store_true", help="skip the earlier kept checkpoints")
    p.add_argument("--out", type=Path, default=None, help="output directory (default <run>/critic_report)")
    return p


def main(argv: list[str]) -> int:
    """Parse ``argv``, write the report, print its path; 2 on bad input."""
    args = _parser().parse_args(argv)
    if args.episodes < 1:
        print(f"robot-rl critic-report: --episodes must be >= 1, got {args.episodes}", file=sys.stderr)
        return 2
    if not (args.run / "config.yaml").is_file():
        print(f"robot-rl critic-report: {args.run} is not a run directory (no config.yaml); pass "
              "outputs/<date>/<time>", file=sys.stderr)
        return 2
    from robot_rl.checkpoint import PREFIX, list_checkpoints, load_checkpoint
    from robot_rl.diagnostics.report import build_report
    from robot_rl.train.run_loading import open_run

    found = list_checkpoints(args.run)
    if not found:
        print(f"robot-rl critic-report: {args.run} has no complete checkpoint under checkpoints/; "
              "train it first (robot-rl train)", file=sys.stderr)
        return 2
    num_envs = args.num_envs or min(args.episodes, 16)
    runner = open_run(args.run, num_envs=num_envs)
    agent = runner.agent
    device = runner.cfg.sim.device

    def loader(path: Path):
        def load() -> None:
            agent.load_state_dict(load_checkpoint(path, device)[1]["agent"])
        return load

    chosen = found[-1:] if args.latest_only else found
    checkpoints = [(int(p.name[len(PREFIX):]), loader(p)) for p in chosen]
    make_env = runner.env_factory
    if agent.policy_inputs == "vla":  # it renders its cameras from the env it was built on
        def make_env(n: int, seed: int):
            return runner.env
    report = build_report(agent, make_env, checkpoints, args.out or args.run / "critic_report",
                          args.episodes, num_envs, args.seed, title=str(args.run), tail=args.tail)
    print(report)
    return 0
