"""``robot-rl bc``: behaviour-cloning pretraining of an actor from a LeRobot-format dataset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands._args import count, number, positive, rate, seed

SUMMARY = "Behaviour-clone an actor (gaussian, deterministic or chunked) from a demo dataset"

EPILOG = """examples:
  robot-rl record --task so101_lift --episodes 30 --num-envs 8 --only-success --out outputs/demos/lift
  robot-rl bc outputs/demos/lift --out outputs/bc/lift --eval-episodes 64
  robot-rl bc outputs/demos/lift --out outputs/bc/lift_chunk --actor chunked --chunk-len 5
  robot-rl train task=so101_reach task.name=so101_lift agent=rlpd critic=ensemble_ln \\
      agent.demos=outputs/demos/lift agent.bc_checkpoint=outputs/bc/lift agent.normalize_obs=true

Writes <out>/bc.safetensors (actor + observation normaliser) and <out>/bc.yaml (config, losses), and
<out>/policy/ (policy.yaml + policy.onnx, evaluable with `robot-rl eval <out>/policy`) when the task's
observation terms are exportable. Observations are normalised with the dataset's meta/stats.json;
whole episodes are held out for validation and training stops when their action MSE stops improving.
A gaussian actor with the agent's widths (default [256, 256] relu) can start agent=rlpd.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl bc", description=SUMMARY + ".", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", type=Path, help="LeRobot dataset dir with observation.policy and action.policy")
    p.add_argument("--out", type=Path, required=True, help="output dir for the BC checkpoint")
    p.add_argument("--actor", default="gaussian", choices=["gaussian", "deterministic", "chunked"],
                   help="gaussian = SAC/RLPD's actor, deterministic = TD3's, chunked = h actions per query")
    p.add_argument("--chunk-len", type=positive, default=None, help="chunked actor: actions per prediction (default 5)")
    p.add_argument("--hidden-dims", type=positive, nargs="+", default=[256, 256])
    p.add_argument("--activation", default="relu")
    p.add_argument("--epochs", type=positive, default=300, help="most epochs (early stopping usually ends sooner)")
    p.add_argument("--patience", type=positive, default=30,
                   help="epochs without a better validation MSE before stopping")
    p.add_argument("--batch-size", type=positive, default=256)
    p.add_argument("--lr", type=rate, default=1e-3)
    p.add_argument("--val-fraction", type=number(low=0.0, high=0.9), default=0.1,
                   help="share of episodes held out (default 0.1)")
    p.add_argument("--only-success", action="store_true", help="train on successful episodes only")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--eval-episodes", type=count, default=0, help="evaluate the policy in sim afterwards (0 = skip)")
    p.add_argument("--task", default=None, help="sim task for eval/export (default: the dataset's meta/robot_rl.json)")
    p.add_argument("--no-export", action="store_true", help="do not write <out>/policy")
    return p


def main(argv: list[str]) -> int:
    """Train, save, optionally export and evaluate; 2 on bad input."""
    args = _parser().parse_args(argv)
    import torch

    from robot_rl.demos.bc import BCConfig, export_bc, load_bc, save_bc, train_bc

    torch.set_num_threads(1)
    if not (args.dataset / "meta" / "info.json").is_file():
        print(f"robot-rl bc: {args.dataset} is not a LeRobot dataset (no meta/info.json); record one with "
              "`robot-rl record`", file=sys.stderr)
        return 2
    chunk_len = args.chunk_len if args.chunk_len is not None else (5 if args.actor == "chunked" else 1)
    try:
        cfg = BCConfig(actor=args.actor, hidden_dims=args.hidden_dims, activation=args.activation, chunk_len=chunk_len,
                       epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, val_fraction=args.val_fraction,
                       patience=args.patience, only_success=args.only_success, seed=args.seed)
        result = train_bc(args.dataset, cfg, progress=sys.stderr.isatty())
        save_bc(result, args.out)  # refuses non-finite weights: nothing is written then
    except (ValueError, KeyError) as err:
        print(f"robot-rl bc: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    best = result.best
    print(f"bc ({cfg.actor}, h={cfg.chunk_len}): {result.train_frames} train / {result.val_frames} val frames, "
          f"best epoch {result.best_epoch} of {len(result.history)}: train MSE {best['train_mse']:.5f}, "
          f"val MSE {best['val_mse']:.5f}; saved {args.out}")
    bc = load_bc(args.out)
    task = args.task or bc.meta.get("task")
    if not args.no_export:
        try:
            print(f"policy artifact: {export_bc(bc, args.out / 'policy', task)}")
        except ValueError as err:  # e.g. a task observation (cube_pos) a real robot cannot provide
            print(f"not exported ({err}); --no-export silences this", file=sys.stderr)
    if args.eval_episodes > 0:
        if not task:
            print("robot-rl bc: --eval-episodes needs --task (the dataset names none)", file=sys.stderr)
            return 2
        import sim
        from robot_rl.train.evaluation import evaluate

        env = sim.make_env(task, num_envs=min(args.eval_episodes, 64), seed=12345)
        summary = evaluate(bc.policy(), env, args.eval_episodes, seed=12345).summary()
        summary["task"] = task
        print(json.dumps(summary, indent=2))
    return 0
