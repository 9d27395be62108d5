"""VLA deployment latency: observation -> command of the policy node's VLA path, ``VLAConfig.cpu``, one robot.

For each camera set (``front``; ``front`` + ``wrist``), 64x64 images, an untrained ``VLAConfig.cpu`` policy
(latency does not depend on the weights) exported as the ROS node runs it (ONNX, 10 Euler steps unrolled):

* **node path, in process** (default): every control tick does the policy node's VLA work (rgb8
  ``sensor_msgs/Image`` -> uint8 ``[3, H, W]`` per camera, :class:`VLARuntime` inference when the chunk executor
  needs a chunk, :class:`ChunkExecutor` step, the raw action for the next tick) on a fresh image and state; timed
  per tick. Two executions: the artifact's (open loop of the whole 16-step chunk: one inference per 16 ticks) and
  ``execute_len = 1`` (an inference every tick: the worst case). p50/p99 over all ticks and over the ticks that
  ran an inference.
* ``--ros``: the same artifacts in ``robot-rl deploy sim2sim`` (simulated so101_reach_lang robot rendering the
  cameras, policy node over DDS): the node's own JointState-stamp -> command latency and inference times from its
  ``stats_file``.

Target (issue 16): obs -> command p99 <= 20 ms at 1 env. Rows go to ``--json`` (default
``docs/results/vla/deploy_latency.json``); figures in docs/results/vla.md, "Deployment latency".

    OMP_NUM_THREADS=1 python benchmarks/vla_latency.py [--ticks 2000] [--ros --episodes 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _results import RESULTS, write_rows

from robot_rl.deploy.actions import action_spec, to_raw
from robot_rl.deploy.ros_env import ros_nodes_path
from robot_rl.deploy.runtime import chunk_executor
from robot_rl.deploy.vla_runtime import VLARuntime
from robot_rl.export_vla import export_vla_policy, make_vla_meta
from robot_rl.models.vla import VLA, InstructionTokenizer, VLAConfig
from robot_rl.models.vla.policy import VLAPolicy
from sim.robots import load_robot
from sim.tasks.so101_reach_lang import INSTRUCTIONS

TARGET_P99_MS = 20.0
CAMERA_SETS = (("front",), ("front", "wrist"))
SIZE = 64


def export_cpu_policy(cameras: tuple[str, ...], out: Path) -> Path:
    """An untrained ``VLAConfig.cpu`` policy for the SO-101 with ``cameras`` at 64x64, exported to ``out``."""
    torch.manual_seed(0)
    texts = list(INSTRUCTIONS.table())
    tokenizer = InstructionTokenizer.train(texts)
    policy = VLAPolicy(VLA(VLAConfig.cpu(6, 6, tokenizer.vocab_size, cameras=cameras)), tokenizer, texts).eval()
    robot = load_robot("so101")
    default = [j.default for j in robot.joints]
    action = action_spec("joint_position_delta_default", robot.control.action_scale, default)
    meta = make_vla_meta(policy, robot.name, robot.joint_names, default, action, robot.control.policy_hz, (SIZE, SIZE),
                         task="so101_reach_lang")
    return export_vla_policy(policy, meta, out)


def summarize(tick_ms: np.ndarray, inferred: np.ndarray) -> dict[str, float]:
    """p50/p99/max of ``tick_ms [T]`` over all ticks and over the ``inferred [T]`` bool ones, and their share."""
    out = {"ticks": len(tick_ms), "inference_share": float(inferred.mean())}
    for name, values in (("all", tick_ms), ("inference", tick_ms[inferred])):
        if len(values):
            p50, p99 = np.percentile(values, [50, 99])
            out |= {f"{name}_p50_ms": float(p50), f"{name}_p99_ms": float(p99), f"{name}_max_ms": float(values.max())}
    return out


def node_path(artifact: Path, ticks: int, execute_len: int | None, seed: int = 0) -> dict[str, float]:
    """Time ``ticks`` control ticks of the policy node's VLA work in this process (module docstring)."""
    sys.path.insert(0, str(ros_nodes_path()))
    from ros_nodes.messages import image_array, image_message

    runtime = VLARuntime(artifact)
    meta, v = runtime.meta, runtime.vla
    executor = chunk_executor(meta, execute_len=execute_len)
    rng = np.random.default_rng(seed)
    frames = [{c: image_message(rng.integers(0, 256, (3, SIZE, SIZE), dtype=np.uint8)) for c in v.cameras}
              for _ in range(8)]
    default = np.asarray(meta.default_joint_pos)
    last_action = np.zeros(meta.action_dim)
    no_chunk = np.zeros((0, meta.chunk_length, meta.action_dim))
    times, inferred = np.zeros(ticks), np.zeros(ticks, dtype=bool)
    for t in range(ticks):
        state = default + 0.05 * rng.standard_normal(meta.action_dim)
        start = time.perf_counter()
        images = {c: image_array(msg) for c, msg in frames[t % len(frames)].items()}
        query = bool(executor.needs_query()[0])
        chunks = runtime.infer(images, v.instructions[t // 100 % len(v.instructions)], state)[None] if query \
            else no_chunk
        target = executor.step(chunks)[0]
        to_raw(meta.action, target, out=last_action)
        times[t], inferred[t] = 1e3 * (time.perf_counter() - start), query
    return summarize(times, inferred)


def ros_path(artifact: Path, episodes: int, domain_id: int, work: Path) -> dict[str, float]:
    """The policy node's own latency statistics over ``episodes`` sim2sim episodes of so101_reach_lang."""
    from robot_rl.commands.deploy import run_episodes

    stats = work / "stats.json"
    run_episodes(artifact, "so101", episodes, 0.0, 5.0, 0.002, domain_id,
                 policy_params={"stats_file": str(stats)})
    data = json.loads(stats.read_text())
    keys = ("latency_p50_ms", "latency_p99_ms", "latency_max_ms", "compute_p99_ms", "inference_p50_ms",
            "inference_p99_ms", "commands", "inferences", "vla_hold")
    return {k: data.get(k, float("nan")) for k in keys}


def main() -> None:
    """Run every camera set, print a table, write the rows."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=2000, help="ticks per in-process run (default 2000)")
    parser.add_argument("--ros", action="store_true", help="also run sim2sim over DDS and read the node's stats")
    parser.add_argument("--episodes", type=int, default=3, help="--ros: measured episodes per camera set")
    parser.add_argument("--domain-id", type=int, default=78)
    parser.add_argument("--json", type=Path, default=RESULTS / "vla" / "deploy_latency.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cameras in CAMERA_SETS:
            artifact = export_cpu_policy(cameras, Path(tmp) / "_".join(cameras))
            for execution, execute_len in (("artifact (open loop, 16)", None), ("every tick (execute_len 1)", 1)):
                row = {"cameras": list(cameras), "path": "node, in process", "execution": execution,
                       **node_path(artifact, args.ticks, execute_len)}
                rows.append(row)
                print(f"{'+'.join(cameras):12s} {execution:28s} all p50/p99 {row['all_p50_ms']:.2f}/"
                      f"{row['all_p99_ms']:.2f} ms, inference ticks p50/p99 {row['inference_p50_ms']:.2f}/"
                      f"{row['inference_p99_ms']:.2f} ms (target p99 <= {TARGET_P99_MS:g})", flush=True)
            if args.ros:
                work = Path(tmp) / f"ros_{'_'.join(cameras)}"
                work.mkdir()
                row = {"cameras": list(cameras), "path": "ROS 2 sim2sim", "execution": "artifact (open loop, 16)",
                       **ros_path(artifact, args.episodes, args.domain_id, work)}
                rows.append(row)
                print(f"{'+'.join(cameras):12s} ROS 2 sim2sim latency p50/p99 {row['latency_p50_ms']:.2f}/"
                      f"{row['latency_p99_ms']:.2f} ms, inference p50/p99 {row['inference_p50_ms']:.2f}/"
                      f"{row['inference_p99_ms']:.2f} ms", flush=True)
    write_rows(args.json, rows, target_p99_ms=TARGET_P99_MS)


if __name__ == "__main__":
    main()
