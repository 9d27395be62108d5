"""Open-loop replay of a recorded episode in sim, with a tracking-error report and a side-by-side video.

The env is rebuilt from ``meta/robot_rl.json`` (or ``task=``), put in the episode's recorded
first state (``sim.qpos``/``sim.qvel``/``sim.target``; without them, the recorded joint positions at
rest), and stepped with the recorded actions (``action.policy``; without it, the recorded joint
targets ``action`` mapped back by ``env.action_for_targets``). After step ``t`` the replayed
joint positions are compared with the recorded ``observation.state[t + 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.sim_io import CAMERA_KEY, read_sidecar, recorded_draws, restore


@dataclass
class ReplayReport:
    """Per-joint tracking error of a replay (radians), and task success."""

    episode: int
    task: str
    joint_names: list[str]
    rms: np.ndarray
    """``[J]`` root-mean-square error of replayed vs recorded joint positions."""
    max_abs: np.ndarray
    """``[J]`` largest absolute error."""
    steps: int
    recorded_success: bool | None
    replayed_success: bool
    note: str = ""
    """Why the replay cannot be exact, when it cannot (e.g. per-step action noise)."""

    def table(self) -> str:
        """The report as text."""
        width = max(len(n) for n in self.joint_names)
        lines = [
            f"replay of episode {self.episode} in {self.task}: {self.steps} steps, open loop",
            f"{'joint'.ljust(width)}  {'rms [rad]':>11}  {'max [rad]':>11}  {'max [deg]':>9}",
        ]
        for name, rms, mx in zip(self.joint_names, self.rms, self.max_abs, strict=True):
            lines.append(f"{name.ljust(width)}  {rms:11.3e}  {mx:11.3e}  {np.degrees(mx):9.4f}")
        lines.append(f"success: recorded {self.recorded_success}, replayed {self.replayed_success}")
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)


def replay(
    root: Path,
    episode: int,
    task: str | None = None,
    video: Path | None = None,
    video_size: tuple[int, int] = (128, 128),
) -> ReplayReport:
    """Replay ``episode`` of the dataset at ``root``; optionally write a side-by-side mp4 to ``video``."""
    import sim
    from sim.render import SimCamera, write_mp4

    ds = LeRobotDataset(root)
    ds.require_finite(*(k for k in ("observation.state", "action", "action.policy", "sim.qpos", "sim.qvel",
                                    "sim.target") if k in ds.features))
    data = ds.episode(episode)
    sidecar = read_sidecar(root)
    task = task or sidecar.get("sim_task")
    if task is None:
        raise ValueError(f"{root} does not name its sim task (no meta/robot_rl.json); pass task=, e.g. so101_reach")
    overrides = dict(sidecar.get("overrides") or {})
    if "randomization" in sidecar:
        overrides["randomization"] = sidecar["randomization"]  # make_env builds the DomainRandCfg
    env = sim.make_env(task, num_envs=1, **overrides)
    joints = env.robot.joint_names
    state_names = ds.features["observation.state"].names
    if state_names is not None and [n.split(".")[0] for n in state_names] != joints:
        raise ValueError(f"dataset joints {state_names} do not match {task}'s robot joints {joints} (same order)")
    env.reset(seed=0)
    if env.has_instructions:  # the episode's instruction names the target its success is scored on
        env.set_instruction(ds.episode_task(episode), [0])
    recorded_q = data["observation.state"].astype(np.float64)
    if "sim.qpos" in data:
        target = data["sim.target"][0] if "sim.target" in data else None
        restore(env, data["sim.qpos"][0], data["sim.qvel"][0], target, recorded_draws(data))
    else:
        qpos = env.capture_state([0]).physics["qpos"][0]
        qpos[env.joint_qpos_index.cpu().numpy()] = recorded_q[0]
        restore(env, qpos, np.zeros(env.model.nv))
    if "action.policy" in data:
        actions = data["action.policy"].astype(np.float32)
    else:
        targets = torch.tensor(data["action"], dtype=torch.float32, device=env.device)
        actions = env.action_for_targets(targets).cpu().numpy()
    steps = len(actions)
    replayed_q = np.zeros((steps, len(joints)))
    replayed_frames, recorded_frames = [], []
    cam = SimCamera(env.model, *video_size) if video else None
    success = False
    try:
        for t in range(steps):
            if cam is not None:
                replayed_frames.append(cam.render_env(env, 0))
                if CAMERA_KEY not in ds.features and "sim.qpos" in data:
                    target = data["sim.target"][t] if "sim.target" in data else None
                    recorded_frames.append(cam.render_state(data["sim.qpos"][t], target))
            pre_reset = env.state.joint_pos
            result = env.step(torch.as_tensor(actions[t][None], device=env.device))
            done = bool((result.terminated | result.truncated)[0])
            # after a done step the env has reset itself: read the pre-reset joints from final_obs instead
            replayed_q[t] = (env.state.joint_pos if not done else pre_reset)[0].cpu().numpy()
            success |= bool(result.info["success"][0])
    finally:
        if cam is not None:
            cam.close()
        env.close()
    err = replayed_q[:-1] - recorded_q[1:]
    if video is not None:
        left = ds.episode_frames(episode, CAMERA_KEY) if CAMERA_KEY in ds.features else np.stack(recorded_frames)
        right = np.stack(replayed_frames)
        if left.shape[1:3] != right.shape[1:3]:
            left = _resize(left, right.shape[1], right.shape[2])
        write_mp4(np.concatenate([left, right], axis=2), video, fps=ds.fps)
    recorded = bool(data["next.success"].any()) if "next.success" in data else None
    note = ""
    if env.cfg.randomization.action_noise_std:
        note = (
            f"the task adds action noise (std {env.cfg.randomization.action_noise_std}) at every step; "
            "it is random, so the replay cannot match exactly"
        )
    return ReplayReport(
        episode,
        task,
        joints,
        np.sqrt((err**2).mean(axis=0)),
        np.abs(err).max(axis=0),
        steps,
        recorded,
        success,
        note,
    )


def _resize(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour resize of uint8 ``[T, h, w, 3]`` to ``[T, height, width, 3]``."""
    rows = np.arange(height) * frames.shape[1] // height
    cols = np.arange(width) * frames.shape[2] // width
    return frames[:, rows][:, :, cols]
