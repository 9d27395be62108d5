"""``robot-rl bc``: behaviour cloning of a LeRobot-format dataset, a thin driver of ``agent=bc``
(:mod:`robot_rl.agents.bc`): a loop of ``agent.update()`` (one epoch each) with early stopping on the
validation MSE, then the run directory (config, checkpoint, policy artifact, eval)."""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.commands._args import command_parser, count, number, positive, rate, seed
from robot_rl.errors import InputError

SUMMARY = "Behaviour-clone an actor (gaussian, deterministic or chunked) from a demo dataset"

EPILOG = """examples:
  robot-rl record --task so101_lift --episodes 30 --num-envs 8 --only-success --out outputs/demos/lift
  robot-rl bc outputs/demos/lift --out outputs/bc/lift --eval-episodes 64
  robot-rl bc outputs/demos/lift --out outputs/bc/lift_chunk --actor chunked --chunk-len 5
  robot-rl train task=so101_reach task.name=so101_lift agent=rlpd critic=ensemble_ln \\
      agent.demos=outputs/demos/lift agent.bc_checkpoint=outputs/bc/lift agent.normalize_obs=true

Trains agent=bc (robot_rl/agents/bc.py) and writes a run directory: <out>/config.yaml and
<out>/checkpoints/step_<epochs>/ (the agent checkpoint of the best epoch), <out>/policy/ (policy.yaml +
policy.onnx, evaluable with `robot-rl eval <out>/policy`) when the task's observation terms are exportable,
and <out>/eval.json with --eval-episodes. Observations are normalised with the demos' statistics; whole
episodes are held out for validation and training stops when their action MSE stops improving. A gaussian
actor with the agent's widths (default [256, 256] relu) can start agent=rlpd (agent.bc_checkpoint=<out>).
"""


def _parser() -> argparse.ArgumentParser:
    p = command_parser("bc", SUMMARY + ".", EPILOG)
    p.add_argument("dataset", type=Path, help="LeRobot dataset dir recorded by `robot-rl record`")
    p.add_argument("--out", type=Path, required=True, help="output run dir for the BC checkpoint")
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


@dataclass
class Fit:
    """What :func:`fit` did: one metrics dict per epoch (``loss/bc``, ``loss/bc_mse``, ``val/mse``), the kept epoch."""

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0

    @property
    def best(self) -> dict[str, float]:
        """Metrics of the kept epoch."""
        return self.history[self.best_epoch]


def fit(agent: Any, epochs: int, patience: int, progress: bool = False) -> Fit:
    """Run ``agent.update()`` (one epoch each) until ``epochs``, or ``patience`` epochs without a lower ``val/mse``;
    leaves ``agent`` at its best epoch's state."""
    from robot_rl.train.metrics_log import scalars
    from robot_rl.train.progress import Progress

    result, best_state, best_val = Fit(), copy.deepcopy(agent.state_dict()), math.inf
    bar = Progress(epochs, enabled=progress)
    try:
        for epoch in range(epochs):
            metrics = scalars(agent.update())
            result.history.append(metrics)
            bar.update(epoch + 1, None, None)
            if metrics["val/mse"] < best_val:
                best_val, result.best_epoch, best_state = metrics["val/mse"], epoch, copy.deepcopy(agent.state_dict())
            elif epoch - result.best_epoch >= patience:
                break
    finally:
        bar.close()
    agent.load_state_dict(best_state)
    return result


def main(argv: list[str]) -> int:
    """Train, save, optionally export and evaluate; 2 on bad input."""
    args = _parser().parse_args(argv)
    import torch

    from robot_rl.demos.sim_io import read_sidecar

    torch.set_num_threads(1)
    if not (args.dataset / "meta" / "info.json").is_file():
        print(f"robot-rl bc: {args.dataset} is not a LeRobot dataset (no meta/info.json); record one with "
              "`robot-rl record`", file=sys.stderr)
        return 2
    task = args.task or read_sidecar(args.dataset).get("sim_task") or None
    chunk_len = args.chunk_len if args.chunk_len is not None else (5 if args.actor == "chunked" else 1)
    overrides = [
        "agent=bc", f"agent.demos={args.dataset.resolve()}", f"agent.actor={args.actor}",
        f"agent.chunk_len={chunk_len}", f"agent.actor_hidden_dims=[{','.join(map(str, args.hidden_dims))}]",
        f"agent.activation={args.activation}", f"agent.batch_size={args.batch_size}", f"agent.actor_lr={args.lr}",
        f"agent.val_fraction={args.val_fraction}", f"agent.only_success_demos={args.only_success}",
        f"agent.split_seed={args.seed}", f"seed={args.seed}", f"task.name={task or 'none'}",
        f"export_formats=[{'' if args.no_export else 'onnx'}]", f"eval_episodes={args.eval_episodes}",
    ]
    try:
        agent, cfg, env = _build(overrides, args.dataset, task)
    except InputError:
        raise
    except (ValueError, KeyError) as err:
        print(f"robot-rl bc: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 2
    start = time.monotonic()
    result = fit(agent, args.epochs, args.patience, progress=sys.stderr.isatty())
    save_run(agent, cfg, args.out, result, time.monotonic() - start)  # refuses non-finite weights: nothing is written
    best = result.best
    print(f"bc ({args.actor}, h={chunk_len}): {len(agent.train_rows)} train / {len(agent.val_rows)} val frames, "
          f"best epoch {result.best_epoch} of {len(result.history)}: train MSE {best['loss/bc_mse']:.5f}, "
          f"val MSE {best['val/mse']:.5f}; saved {args.out}")
    if env is not None and not args.no_export:
        from robot_rl.train.export_run import export_agent_policy

        training = {"bc": json.loads((args.out / "bc.json").read_text())}
        try:
            print(f"policy artifact: {export_agent_policy(agent, env, args.out / 'policy', cfg, training)}")
        except ValueError as err:  # e.g. a task observation (cube_pos) a real robot cannot provide
            print(f"not exported ({err}); --no-export silences this", file=sys.stderr)
    if args.eval_episodes > 0:
        if env is None:
            print("robot-rl bc: --eval-episodes needs --task (the dataset names none)", file=sys.stderr)
            return 2
        print(json.dumps(_evaluate(agent, cfg, args.out, args.eval_episodes), indent=2))
    return 0


def _build(overrides: list[str], dataset: Path, task: str | None) -> tuple[Any, Any, Any]:
    """``(agent, config, env)``: agent=bc on the task's env spec (``env`` None without a task: the dataset's sizes,
    actions in ``[-1, 1]``)."""
    import torch

    from robot_rl.agents import EnvSpec, make_agent
    from robot_rl.compose import compose
    from robot_rl.data.lerobot import LeRobotDataset
    from robot_rl.train.runner import sim_env_factory

    cfg = compose(overrides)
    env = sim_env_factory(cfg)(1, cfg.seed) if task else None
    if env is not None:
        spec = EnvSpec.from_env(env)
    else:
        features = LeRobotDataset(dataset).features
        dims = [int(features[k].shape[0]) if k in features else 0 for k in ("observation.policy", "action.policy")]
        spec = EnvSpec(num_envs=1, observation_dims={"policy": dims[0]}, action_dim=dims[1],
                       action_low=-torch.ones(dims[1]), action_high=torch.ones(dims[1]))
    torch.manual_seed(cfg.seed)
    return make_agent(cfg.agent, cfg.critic, spec, cfg.sim.device), cfg, env


def save_run(agent: Any, cfg: Any, out: Path, result: Fit, elapsed_s: float) -> None:
    """``<out>/config.yaml``, a checkpoint the runners read back (``robot-rl eval <out>``, ``bc_checkpoint``) and
    ``<out>/bc.json`` (the split's sizes and the kept epoch's losses)."""
    import torch

    from robot_rl.checkpoint import NonFiniteStateError, save_checkpoint
    from robot_rl.config.io import save_train_config

    state = {"agent": agent.state_dict(), "runner": {"env_steps": 0, "updates": len(result.history),
                                                     "elapsed_s": elapsed_s, "torch_rng": torch.get_rng_state()}}
    try:
        save_checkpoint(out, len(result.history), state)
    except NonFiniteStateError as err:
        raise InputError(f"holds NaN or inf: training diverged; nothing was saved ({err})",
                         file=f"BC of {cfg.agent.demos}", fix="lower --lr, check the dataset's values, and retrain") \
            from None
    save_train_config(cfg, out / "config.yaml")
    summary = {"dataset": cfg.agent.demos, "train_frames": len(agent.train_rows), "val_frames": len(agent.val_rows),
               "best_epoch": result.best_epoch, "epochs_run": len(result.history), "best": result.best}
    (out / "bc.json").write_text(json.dumps(summary, indent=2))


def _evaluate(agent: Any, cfg: Any, out: Path, episodes: int) -> dict[str, Any]:
    """``episodes`` deterministic episodes of the clone as deployed (chunks played as exported); writes eval.json."""
    from robot_rl.train.evaluation import evaluate, playable
    from robot_rl.train.runner import sim_env_factory

    env = sim_env_factory(cfg)(min(episodes, 64), 12345)
    summary = evaluate(playable(agent), env, episodes, seed=12345).summary()
    summary["task"] = cfg.task.name
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary
