"""``robot-rl export``: write a run's policy as a deployable artifact (ONNX / TorchScript + policy.yaml)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robot_rl.commands._args import command_parser, positive

SUMMARY = "Export a run's policy artifact: policy.onnx, policy.pt, policy.yaml, manifest.json (contract 3)"


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        "export",
        "Export the latest checkpoint of a run as a policy artifact that needs nothing "
        "from training: normalisation inside, joint targets out, metadata in policy.yaml. Every "
        "exported graph is checked against the torch policy to 1e-5.",
        "example:\n  robot-rl export outputs/2026-11-30/11-02-03 --format onnx,torchscript",
    )
    p.add_argument("run", type=Path, help="run directory (holds config.yaml and checkpoints/)")
    p.add_argument("--format", default="onnx,torchscript",
                   help="comma-separated subset of onnx,torchscript (default both)")
    p.add_argument("--out", type=Path, default=None, help="artifact directory (default <run>/policy)")
    p.add_argument("--execute-len", type=positive, default=None, metavar="N",
                   help="a chunked policy (VLA, chunked TD3): play N of each chunk's actions open loop before the "
                        "next inference (1: re-plan every step) instead of the run's agent.execute_len; written into "
                        "policy.yaml's chunk_execution (robot-rl eval --execute-len tries a length without exporting)")
    return p


def main(argv: list[str]) -> int:
    """Parse ``argv`` and export; 2 on bad input."""
    from robot_rl.export import FORMATS

    args = _parser().parse_args(argv)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        print(f"robot-rl export: --format {args.format!r} must list some of {','.join(FORMATS)}", file=sys.stderr)
        return 2
    from robot_rl.train.export_run import export_agent_policy
    from robot_rl.train.run_loading import open_run

    runner = open_run(args.run)
    out = export_agent_policy(runner.agent, runner.env, args.out or args.run / "policy", runner.cfg,
                              {"env_steps": runner.env_steps}, formats, execute_len=args.execute_len)
    print(f"exported {', '.join(formats)} at env step {runner.env_steps:,} to {out}")
    return 0
