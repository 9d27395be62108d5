"""Is dataset I/O a bottleneck? Frames/s written and read, beside the simulator's frame rate.

    python benchmarks/dataset_io.py                 # ~1 min on 2 CPU cores
    python benchmarks/dataset_io.py --episodes 50 --frames 200 --num-envs 64

Measures, on synthetic SO-101-shaped frames (6-D state and action, reward, done):

- write: ``LeRobotWriter.add_frame`` + ``save_episode`` (parquet, stats, metadata, atomic renames),
  state-only and with one 64x64 camera (AV1 encode + remux into the chunk mp4), with and without
  the fsyncs that make each committed episode survive a power loss (``durable``);
- read: opening the dataset (all checks), ``ds[i]`` for every frame (LeRobot's access pattern:
  one video decode per item), and whole-episode reads (``episode`` + ``episode_frames``);
- the peer: ``sim.make_env("so101_reach", num_envs)`` env-frames/s with zero actions, and the
  rate of ``env.render`` at 64x64 for one env (what recording a camera costs in sim).

Each line prints the best of ``--repeats`` runs (the machine may be shared) and its ratio to the
simulator's env-frames/s. torch runs on one thread, as in ``robot-rl record``. The rows go to ``--out``
(default ``docs/results/demos/dataset_io.json``, with the command, commit, load and machine).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import RESULTS, write_rows

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter

NAMES = [f"{j}.pos" for j in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")]


def features(camera: bool) -> dict:
    """SO-101-shaped features, optionally with one 64x64 video camera."""
    out = {
        "observation.state": {"dtype": "float32", "shape": [6], "names": NAMES},
        "action": {"dtype": "float32", "shape": [6], "names": NAMES},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    if camera:
        out["observation.images.front"] = {
            "dtype": "video",
            "shape": [64, 64, 3],
            "names": ["height", "width", "channels"],
        }
    return out


def bench_write(root: Path, episodes: int, frames: int, camera: bool, durable: bool = True) -> float:
    """Frames/s through add_frame + save_episode."""
    rng = np.random.default_rng(0)
    state = rng.normal(size=(frames, 6)).astype(np.float32)
    y, x = np.mgrid[0:64, 0:64]
    images = [np.stack([x * 4, y * 4, np.full_like(x, 4 * t % 256)], -1).astype(np.uint8) for t in range(frames)]
    start = time.perf_counter()
    with LeRobotWriter.create(root, fps=25, features=features(camera), robot_type="so101", durable=durable) as writer:
        for _ in range(episodes):
            for t in range(frames):
                frame = {
                    "observation.state": state[t],
                    "action": state[t],
                    "next.reward": np.float32(0.0),
                    "next.done": t == frames - 1,
                }
                if camera:
                    frame["observation.images.front"] = images[t]
                writer.add_frame(frame, task="reach the target")
            writer.save_episode()
    return episodes * frames / (time.perf_counter() - start)


def bench_read(root: Path, camera: bool, max_items: int) -> dict[str, float]:
    """Open time (s), ds[i] items/s, whole-episode frames/s."""
    start = time.perf_counter()
    ds = LeRobotDataset(root)
    opened = time.perf_counter() - start
    items = min(len(ds), max_items)
    start = time.perf_counter()
    for i in range(items):
        ds[i]
    per_item = items / (time.perf_counter() - start)
    start = time.perf_counter()
    for ep in range(ds.num_episodes):
        ds.episode(ep)
        if camera:
            ds.episode_frames(ep, "observation.images.front")
    whole = len(ds) / (time.perf_counter() - start)
    return {"open_s": opened, "getitem": per_item, "episode": whole}


def bench_sim(num_envs: int, steps: int) -> tuple[float, float]:
    """(env-frames/s stepping so101_reach with zero actions, 64x64 renders/s of one env).

    Renders go through the recorder's cached camera (``robot-rl record --camera``).
    """
    import torch

    import sim
    from sim.render import SimCamera

    env = sim.make_env("so101_reach", num_envs)
    env.reset(seed=0)
    action = torch.zeros(num_envs, env.action_dim)
    for _ in range(5):
        env.step(action)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(action)
    step_rate = steps * num_envs / (time.perf_counter() - start)
    camera = SimCamera(env.model, 64, 64)
    camera.render_env(env, 0)
    renders = max(5, steps // 5)
    start = time.perf_counter()
    for _ in range(renders):
        camera.render_env(env, 0)
    render_rate = renders / (time.perf_counter() - start)
    camera.close()
    env.close()
    return step_rate, render_rate


def best_of(reads: list[dict[str, float]]) -> dict[str, float]:
    """The best of repeated :func:`bench_read` results, per key: the shortest ``open_s``, the highest rates."""
    return {k: (min if k == "open_s" else max)(r[k] for r in reads) for k in reads[0]}


def summary(rows: list[tuple[str, float]], sim_rate: float) -> list[dict[str, float | str]]:
    """``(measurement, frames/s)`` rows as dicts with the ratio to the simulator's env-frames/s."""
    return [{"measurement": name, "frames_per_s": rate, "x_sim_step_rate": rate / sim_rate} for name, rate in rows]


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--frames", type=int, default=100, help="frames per episode")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--sim-steps", type=int, default=50)
    parser.add_argument("--max-items", type=int, default=1000, help="ds[i] calls timed per dataset")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per measurement")
    parser.add_argument("--out", type=Path, default=RESULTS / "demos" / "dataset_io.json",
                        help="JSON file for the rows (default: %(default)s)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as robot-rl record does: tiny tensors, and the machine is shared

    sim_rate, render_rate = bench_sim(args.num_envs, args.sim_steps)
    rows = [
        (f"sim so101_reach step, {args.num_envs} envs (env-frames/s)", sim_rate),
        ("sim render 64x64, one env (frames/s)", render_rate),
    ]
    tmp = Path(tempfile.mkdtemp(prefix="dataset_io_"))
    try:
        for camera in (False, True):
            label = "1 camera 64x64 AV1" if camera else "state-only"
            writes = []
            for repeat in range(args.repeats):
                root = tmp / f"{label.replace(' ', '_')}_{repeat}"
                writes.append(bench_write(root, args.episodes, args.frames, camera))
            rows.append((f"write {label} (frames/s)", max(writes)))
            fast = [
                bench_write(
                    tmp / f"{label.replace(' ', '_')}_nosync_{r}", args.episodes, args.frames, camera, durable=False
                )
                for r in range(args.repeats)
            ]
            rows.append((f"write {label}, durable=False (frames/s)", max(fast)))
            reads = [bench_read(root, camera, args.max_items) for _ in range(args.repeats)]
            read = best_of(reads)
            rows.append((f"read {label}: ds[i] (frames/s)", read["getitem"]))
            rows.append((f"read {label}: whole episodes (frames/s)", read["episode"]))
            print(
                f"[{label}] open + structural checks: {read['open_s'] * 1000:.0f} ms for "
                f"{args.episodes * args.frames} frames; size on disk "
                f"{sum(p.stat().st_size for p in root.rglob('*') if p.is_file()) / 1e6:.2f} MB"
            )
    finally:
        shutil.rmtree(tmp)
    table = summary(rows, sim_rate)
    width = max(len(r["measurement"]) for r in table)
    print(f"\n{'measurement'.ljust(width)}  {'rate':>12}  {'x sim step rate':>15}")
    for r in table:
        print(f"{r['measurement'].ljust(width)}  {r['frames_per_s']:12.0f}  {r['x_sim_step_rate']:15.2f}")
    write_rows(args.out, table)


if __name__ == "__main__":
    main()
