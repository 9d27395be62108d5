"""``robot-rl vla-lerobot-eval``: evaluate a user's local LeRobot policy directory (SmolVLA) on a language task in sim.

Runs in the venv of ``bash .ci/setup_lerobot`` (LeRobot 0.6.1 needs Python >= 3.12); docs/vla.md, "LeRobot policies".
The task env renders the policy's cameras at its image height; every env plays each chunk open loop for
``execute_len`` steps (LeRobot's ``n_action_steps`` unless ``--execute-len``), re-querying only the envs whose
chunk ran out or whose episode ended.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.commands._args import add_episode_args, command_parser, positive

SUMMARY = "Evaluate a local LeRobot policy directory (SmolVLA) on a language task: success per instruction"
ACTION_NOTE = ("Needs the venv of `bash .ci/setup_lerobot`. --action joint (default): the policy's `action` is joint "
               "targets (our recordings' `action`); --action policy: it is the env action in [-1, 1] (our "
               "`action.policy`).")
"""The epilog note of the LeRobot commands (this one and ``vla-lerobot-export``)."""


def add_policy_args(parser: argparse.ArgumentParser) -> None:
    """The LeRobot commands' ``policy`` directory and ``--action`` (what the policy's ``action`` feature is)."""
    parser.add_argument("policy", type=Path, help="LeRobot policy directory (what save_pretrained wrote)")
    parser.add_argument("--action", choices=("joint", "policy"), default="joint",
                        help="what the policy's `action` feature is: joint targets (rad) or the env action in [-1, 1]")


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        "vla-lerobot-eval",
        "Load a LeRobot policy directory (config.json, model.safetensors, pre/post-processor files) offline and run "
        "N episodes of a language task with cameras; print success overall, per target and per instruction.",
        "examples:\n  robot-rl vla-lerobot-eval outputs/smolvla_reach --task so101_reach_lang --episodes 20\n"
        "  robot-rl vla-lerobot-eval outputs/smolvla_reach --task so101_reach_lang --action policy --execute-len 4\n\n"
        + ACTION_NOTE,
    )
    add_policy_args(p)
    p.add_argument("--task", default="so101_reach_lang", help="language task (default so101_reach_lang)")
    add_episode_args(p, episodes=20, envs_cap=8, what="episodes to run")
    p.add_argument("--execute-len", type=positive, default=None,
                   help="actions played per inference (default: the policy's n_action_steps)")
    return p


@torch.no_grad()
def evaluate_lerobot(policy: Any, env: Any, episodes: int, seed: int, execute_len: int | None = None) -> dict[str, Any]:
    """Run ``episodes`` episodes of ``policy`` (a :class:`~robot_rl.models.vla.lerobot_policy.LeRobotPolicy`, or any
    object with its ``act``/``cameras``/``chunk_len``/``action_dim``) on the language-task ``env`` built with the
    policy's cameras.

    Each env ``i`` plays a fixed quota of episodes (``episodes`` split evenly). Camera ``c`` is the env's group
    ``camera_<c>`` (uint8 ``[N, 3, H, W]``), the state is ``env.state.joint_pos [N, J]``, the instruction is
    ``env.instructions()[i]`` of the episode being played.

    Returns:
        :meth:`robot_rl.train.evaluation.EvalResult.summary` plus ``success_by_target`` ``{target: rate}``,
        ``success_by_instruction`` ``{text: [successes, episodes]}``, ``queries`` (policy calls), ``act_s_mean``
        (seconds per call), ``wall_s`` and ``actions_finite_in_range`` (every action finite and in ``[-1, 1]``).
    """
    from robot_rl.models.chunked_actor import ChunkExecutor
    from robot_rl.train.evaluation import EvalResult

    N = env.num_envs
    quota = torch.tensor([episodes // N + (i < episodes % N) for i in range(N)])
    count = torch.zeros(N, dtype=torch.long)
    ep_ret, ep_len = torch.zeros(N), torch.zeros(N, dtype=torch.long)
    result, per_text = EvalResult(), {}
    executor = ChunkExecutor(N, policy.chunk_len, policy.action_dim, "open_loop", execute_len, device=env.device)
    act_seconds, in_range = [], True
    start = time.perf_counter()
    obs = env.reset(seed=seed)
    texts = env.instructions()

    def chunks(rows: torch.Tensor) -> torch.Tensor:
        tic = time.perf_counter()
        images = {c: obs[f"camera_{c}"][rows] for c in policy.cameras}
        out = policy.act(images, [texts[i] for i in rows.tolist()], env.state.joint_pos[rows])
        act_seconds.append(time.perf_counter() - tic)
        return out

    for _ in range(int(quota.max()) * env.max_episode_steps + 1):
        if bool((count >= quota).all()):
            break
        action = executor.act(torch.arange(N, device=env.device), chunks)
        in_range &= bool(torch.isfinite(action).all()) and float(action.abs().max()) <= 1.0
        step = env.step(action)
        ep_ret += step.reward.cpu()
        ep_len += 1
        done = (step.terminated | step.truncated).cpu()
        executor.reset(done)
        success = step.info["success"].cpu()
        for i in torch.nonzero(done & (count < quota)).flatten().tolist():
            result.returns.append(float(ep_ret[i]))
            result.lengths.append(int(ep_len[i]))
            result.successes.append(bool(success[i]))
            per_text.setdefault(texts[i], [0, 0])
            per_text[texts[i]][0] += int(success[i])
            per_text[texts[i]][1] += 1
        count += (done & (count < quota)).long()
        ep_ret[done], ep_len[done] = 0.0, 0
        obs, texts = step.obs, env.instructions()
    if len(result.returns) != episodes:
        raise RuntimeError(f"evaluation finished {len(result.returns)}/{episodes} episodes")
    targets = env.instruction_set.targets
    by_target = {t: [0, 0] for t in targets}
    for text, (k, n) in per_text.items():
        tally = by_target[targets[env.instruction_set.parse(text)]]
        tally[0] += k
        tally[1] += n
    return {**result.summary(),
            "success_by_target": {t: k / n for t, (k, n) in by_target.items() if n},
            "success_by_instruction": dict(sorted(per_text.items())),
            "queries": len(act_seconds), "act_s_mean": sum(act_seconds) / max(1, len(act_seconds)),
            "wall_s": time.perf_counter() - start, "actions_finite_in_range": in_range}


def main(argv: list[str]) -> int:
    """Parse ``argv``, load the policy, evaluate, print a JSON summary; 2 on bad input."""
    args = _parser().parse_args(argv)
    import sim
    from robot_rl.deploy.actions import robot_action_spec
    from robot_rl.errors import InputError
    from robot_rl.models.vla.lerobot_policy import LeRobotPolicy, check_policy_dir

    check_policy_dir(args.policy)  # before building an env: a bad directory is refused at once
    num_envs = args.num_envs or min(args.episodes, 8)
    probe = sim.make_env(args.task, 1, seed=args.seed)
    if not probe.has_instructions:
        raise InputError("has no instructions", key="--task", value=args.task,
                         fix="use a language task (so101_reach_lang, so101_pick_lang)")
    spec = robot_action_spec(probe.robot) if args.action == "joint" else None
    probe.close()
    with contextlib.redirect_stdout(sys.stderr):  # LeRobot prints while loading: stdout stays the JSON summary
        policy = LeRobotPolicy.load(args.policy, action_spec=spec)
    heights = {shape[1] for shape in policy.image_shapes.values()}
    env = sim.make_env(args.task, num_envs, seed=args.seed, cameras=list(policy.cameras), image_size=max(heights))
    try:
        summary = evaluate_lerobot(policy, env, args.episodes, args.seed, args.execute_len or policy.execute_len)
    finally:
        env.close()
    print(json.dumps({"policy": str(args.policy), "task": args.task, "action": args.action, **summary}, indent=2))
    return 0
