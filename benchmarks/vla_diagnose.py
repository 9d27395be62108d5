"""Why does a trained VLA miss? Two measurements of one ``agent=vla`` run on a reaching task (``so101_reach_lang``).

1. **Fit on its own demonstrations**: chunks sampled (zero noise) on the dataset's first, fifth and last frame of
   every fifth episode, against the recorded chunk: mean cosine of the motion (chunk minus the held pose, the
   first ``execute_len`` steps) and its size. A policy must initiate the reach from the first frame, where the arm
   has not moved yet and only the images and the instruction say where to go.
2. **Closed loop in sim**: ``--episodes`` fresh episodes (seed ``--seed``, not the recording's), played as
   evaluation plays them: how far the gripper moved, and its distance to the named target at the start, the closest
   it came and at the last step before the time limit, beside its distance to the nearest target of any colour.
3. **Does the keypoint find the named target?** (``image_encoder=efficientnet_lite0_film``): on the first frame of
   those episodes, the distance in pixels between each world camera's first keypoint and the named target's image
   position (``env.image_position``), beside that of always guessing the frame's centre. ``agent.target_keypoint``
   trains exactly this; without it the keypoint is free to track anything.

    python benchmarks/vla_diagnose.py outputs/bench_vla_sft/so101_reach_lang-film --episodes 20

Prints a summary and writes it, with the command and commit, to ``docs/results/vla/diagnosis-<run name>.json``
(or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from _results import RESULTS, write_rows

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.train.evaluation import playable
from robot_rl.train.run_loading import open_run


def fit_on_demonstrations(agent) -> dict:
    """Sampled vs recorded first chunks on the dataset's first / fifth / last frames of every fifth episode."""
    batches, model = agent.load_batches(), agent.model.eval()
    ds = LeRobotDataset(agent.cfg.dataset)
    steps = agent.cfg.execute_len
    out = {}
    for name, pick in (("first", lambda a, b: a), ("fifth", lambda a, b: min(a + 4, b - 1)),
                       ("last", lambda a, b: b - 1)):
        index = torch.tensor([pick(*ds.episode_range(e)) for e in range(0, ds.num_episodes, 5)])
        batch = batches.batch(index)
        with torch.no_grad():
            chunk = model.sample(batch, torch.zeros(batch["action"].shape))
        held = model.anchor(batch["state"])
        true, pred = (batch["action"] - held)[:, :steps], (chunk - held)[:, :steps]
        out[name] = {"frames": len(index),
                     "motion_cosine": round(torch.cosine_similarity(true.flatten(1), pred.flatten(1)).mean().item(), 3),
                     "recorded_motion": round(true.norm(dim=-1).mean().item(), 4),
                     "sampled_motion": round(pred.norm(dim=-1).mean().item(), 4)}
    return out


def keypoint_error(agent, env) -> dict:
    """Per world camera the agent sees: median pixel distance of the first keypoint to the named target on the
    current frame, and of the frame's centre (a keypoint that learned nothing sits near it)."""
    model = agent.model.eval()
    seen = model.config.cameras
    images = env.camera_images()
    tokens, mask = agent.tokenizer.encode(env.instructions(), model.config.max_text_len)
    obs = {"images": {c: images[c] for c in seen}, "tokens": tokens, "token_mask": mask,
           "state": env.joint_positions()}
    with torch.no_grad():
        points = model.keypoints(obs)[:, :, 0]  # [N, C, 2]
    size = model.config.image_size
    out = {}
    for c in (c for c in seen if c in env.world_cameras()):
        where = env.image_position(env.target, c)
        keypoint = points[:, seen.index(c)]
        out[c] = {"median_keypoint_error_px": round((keypoint - where).norm(dim=1).median().item() * size / 2, 1),
                  "median_centre_error_px": round(where.norm(dim=1).median().item() * size / 2, 1)}
    return out


def closed_loop(runner, episodes: int, seed: int) -> dict:
    """One episode per env, stopped the step before the time limit (an env resets at it)."""
    env = runner.env_factory(episodes, seed)
    player = playable(runner.agent)
    obs = env.reset()
    keypoints = keypoint_error(runner.agent, env) if runner.agent.model.instructed_images else None
    start = env.state.site("end_effector").clone()
    named, targets = env.target.clone(), env.targets.clone()
    closest = (start - named).norm(dim=1)
    for _ in range(env.max_episode_steps - 1):
        obs = env.step(player.act(env, obs)).obs
        closest = torch.minimum(closest, (env.state.site("end_effector") - named).norm(dim=1))
    end = env.state.site("end_effector")

    def cm(x: torch.Tensor) -> float:
        return round(100 * x.median().item(), 1)

    return {"episodes": episodes, "seed": seed, "median_moved_cm": cm((end - start).norm(dim=1)),
            "median_start_to_named_cm": cm((start - named).norm(dim=1)),
            "median_closest_to_named_cm": cm(closest), "median_end_to_named_cm": cm((end - named).norm(dim=1)),
            "median_end_to_nearest_any_cm": cm((end.unsqueeze(1) - targets).norm(dim=-1).min(1).values),
            "within_2cm_at_end": round(((end - named).norm(dim=1) < 0.02).float().mean().item(), 3),
            **({"first_frame_keypoint": keypoints} if keypoints is not None else {})}


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="an agent=vla run directory on a reaching language task")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--out", type=Path, default=None, help="default: docs/results/vla/diagnosis-<run name>.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    runner = open_run(args.run, num_envs=args.episodes)
    result = {"run": str(args.run), "fit": fit_on_demonstrations(runner.agent),
              "closed_loop": closed_loop(runner, args.episodes, args.seed)}
    print(json.dumps(result, indent=2))
    out = args.out or RESULTS / "vla" / f"diagnosis-{args.run.name}.json"
    write_rows(out, result, ["benchmarks/vla_diagnose.py", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
