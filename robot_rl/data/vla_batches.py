"""Training batches of the VLA family (:mod:`robot_rl.models.vla`) from a recorded LeRobot dataset.

The dataset needs camera features ``observation.images.<camera>`` (video or image) and task strings
(``robot-rl record`` of a language task stores each episode's instruction). At load every frame of every
chosen camera is decoded once into memory (uint8, ``3*H*W`` bytes per frame and camera; with ``image_size``
resampled one episode at a time to ``image_size`` square, so only those bytes are kept), every task
string is tokenised once, and each frame's action chunk rows are resolved with LeRobot's window rule
(:func:`robot_rl.data.lerobot.windows.window`: steps past the episode end repeat its last action and are
flagged in ``action_is_pad``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.lerobot.windows import window
from robot_rl.errors import InputError
from robot_rl.models.vla.tokenizer import InstructionTokenizer

IMAGES_PREFIX = "observation.images."


class VLABatches:
    """Frames of a LeRobot dataset as VLA batches (see :meth:`batch` for the keys and shapes)."""

    def __init__(self, root: str | Path, tokenizer: InstructionTokenizer, chunk_len: int, max_text_len: int,
                 cameras: tuple[str, ...] | None = None, image_size: int | None = None,
                 state_key: str = "observation.state",
                 action_key: str = "action.policy", target_key: str | None = None,
                 target_map: Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor] | None = None,
                 action_map: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        """Load ``root``.

        Args:
            tokenizer: encodes the dataset's task strings.
            chunk_len: H, actions per chunk.
            max_text_len: L, tokens kept per instruction.
            cameras: camera names (``front`` for ``observation.images.front``); None: all the dataset has.
            image_size: resample every frame to ``image_size`` square (the deploy runtime's nearest-pixel rule,
                :func:`~robot_rl.deploy.vla_runtime.resize_nearest`); None: keep the dataset's size.
            state_key: the state feature ``[S]``.
            action_key: the action feature ``[A]`` (``action.policy``: the env's action in [-1, 1];
                ``action``: the actuator targets).
            target_key: a per-frame feature ``[T]`` batches also carry as ``"target"`` (e.g. ``sim.target``, the
                named object's position); None: none.
            target_map: ``(target [N, T] or None, state [N, S]) -> [N, ...]``, called once at load: batches carry its
                result as ``"target"`` (e.g. image positions of the named object and of the gripper per camera,
                :meth:`VLAAgent.keypoint_targets <robot_rl.agents.vla.VLAAgent.keypoint_targets>`); None: the
                ``target_key`` column as it is.
            action_map: ``(action [N, A]) -> [N, A]``, called once at load: batches carry its result as the action
                and the action statistics are its own (e.g. joint targets -> the env's action,
                ``EnvSpec.action_for_targets``); None: the ``action_key`` column as it is.

        Raises:
            InputError: a feature is missing, the dataset has no camera or no frames.
        """
        ds = LeRobotDataset(root)
        have = [k[len(IMAGES_PREFIX):] for k in ds.camera_keys if k.startswith(IMAGES_PREFIX)]
        self.cameras = tuple(have) if cameras is None else tuple(cameras)
        extra = [target_key] if target_key else []
        for key in (state_key, action_key, *(IMAGES_PREFIX + c for c in self.cameras), *extra):
            if key not in ds.features:
                raise InputError("feature not in the dataset", file=ds.root, key=key,
                                 fix=f"choose among {sorted(ds.features)} (cameras: {have})")
        if not self.cameras or len(ds) == 0:
            raise InputError("a VLA dataset needs camera frames and at least one episode", file=ds.root,
                             fix="record a language task with cameras, e.g. robot-rl record task=so101_reach_lang "
                                 "task.env.cameras=[front]")
        ds.require_finite(state_key, action_key, *extra)
        self.state = torch.tensor(ds.column(state_key), dtype=torch.float32)  # [N, S]
        self.target_key = target_key
        """The feature ``target`` was read from (None: none; any ``target`` is then ``target_map``'s of the state)."""
        self.target = None if target_key is None else torch.tensor(ds.column(target_key), dtype=torch.float32)
        """``[N, ...]`` the ``target_key`` feature (through ``target_map``), or None."""
        if target_map is not None:
            self.target = target_map(self.target, self.state)
        self.action = torch.tensor(ds.column(action_key), dtype=torch.float32)  # [N, A]
        if action_map is not None:
            self.action = action_map(self.action).to(torch.float32)
        self.images = {cam: self._decode(ds, IMAGES_PREFIX + cam, image_size)  # uint8 [N, 3, H, W]
                       for cam in self.cameras}
        self.texts = list(ds.tasks)
        self.tokens, self.token_mask = tokenizer.encode(self.texts, max_text_len)  # [num_tasks, L]
        self.task_index = torch.tensor(ds.column("task_index"), dtype=torch.long)
        offsets = np.arange(chunk_len)
        rows = np.empty((len(ds), chunk_len), dtype=np.int64)
        pad = np.empty((len(ds), chunk_len), dtype=bool)
        episode_start = np.empty(len(ds), dtype=np.int64)
        for e in range(ds.num_episodes):
            start, stop = ds.episode_range(e)
            episode_start[start:stop] = start
            for i in range(start, stop):
                rows[i], pad[i] = window(i, start, stop, offsets)
        self.chunk_rows, self.chunk_pad = torch.from_numpy(rows), torch.from_numpy(pad)
        self.episode_start = torch.from_numpy(episode_start)
        """``[N]`` the first frame of each frame's episode."""
        self.stats = {key: {s: torch.as_tensor(ds.stats[key][s], dtype=torch.float32) for s in ("mean", "std")}
                      for key in (state_key, action_key)}
        if action_map is not None:  # the dataset's statistics are of the unmapped column
            self.stats[action_key] = {"mean": self.action.mean(0), "std": self.action.std(0, unbiased=False)}
        self.state_key, self.action_key = state_key, action_key
        self.features: dict[str, torch.Tensor] | None = None
        """``{camera: float16 [N, F, h, w]}`` after :meth:`cache_features`: batches then carry these, not images."""
        self.keypoints: torch.Tensor | None = None
        """``[N, C, K, 2]`` after :meth:`cache_keypoints`: batches then carry these, not images or features."""

    @staticmethod
    def _decode(ds: LeRobotDataset, key: str, image_size: int | None) -> torch.Tensor:
        """Every frame of camera ``key``, uint8 ``[N, 3, H, W]`` in global row order (``H = W = image_size`` if given,
        each episode resampled as it is decoded)."""
        from robot_rl.deploy.vla_runtime import resize_nearest

        height, width, _ = ds.features[key].shape
        if image_size:
            height = width = image_size
        out = np.empty((len(ds), 3, height, width), dtype=np.uint8)
        for e in range(ds.num_episodes):
            start, stop = ds.episode_range(e)
            frames = ds.episode_frames(e, key).transpose(0, 3, 1, 2)  # [T, 3, h, w]
            out[start:stop] = resize_nearest(frames, height, width) if image_size else frames
        return torch.from_numpy(out)

    def __len__(self) -> int:
        """Number of frames."""
        return len(self.state)

    def normalization(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(state_mean [S], state_std [S], action_mean [A], action_std [A])`` from the dataset's stats
        (the arguments of :meth:`robot_rl.models.vla.model.VLA.set_stats`)."""
        s, a = self.stats[self.state_key], self.stats[self.action_key]
        return s["mean"], s["std"], a["mean"], a["std"]

    def anchored_normalization(self) -> tuple[torch.Tensor, ...]:
        """``(state_mean [S], state_std [S], residual_mean [A], residual_std [A], weight [A, S], bias [A])``: the
        least-squares linear map ``state -> action`` over all frames (:meth:`VLA.set_anchor
        <robot_rl.models.vla.model.VLA.set_anchor>`) and the stats of every chunk step's residual ``action[t + k] -
        (state[t] @ weight.T + bias)`` (what the model then predicts, standardised)."""
        x = torch.cat([self.state, torch.ones(len(self.state), 1)], dim=1).double()
        solution = torch.linalg.lstsq(x, self.action.double()).solution.float()  # [S + 1, A]
        weight, bias = solution[:-1].T.contiguous(), solution[-1]
        residual = self.chunk_residual(weight, bias)
        s = self.stats[self.state_key]
        return s["mean"], s["std"], residual.mean(dim=(0, 1)), residual.std(dim=(0, 1)), weight, bias

    @torch.no_grad()
    def cache_features(self, encode: Callable[[torch.Tensor], torch.Tensor], chunk: int = 256) -> None:
        """Run a frozen image network ``encode`` (uint8 ``[B, 3, H, W]`` -> ``[B, F, h, w]``) over every frame of every
        camera once and keep the results (float16) instead of the images: :meth:`batch` then returns them under
        ``"image_features"`` (no image augmentation applies to them)."""
        self.features = {cam: torch.cat([encode(frames[i:i + chunk]).half() for i in range(0, len(frames), chunk)])
                         for cam, frames in self.images.items()}
        self.images = {}

    def cache_keypoints(self, locate: Callable[[dict], torch.Tensor], chunk: int = 512) -> None:
        """Run a frozen keypoint head ``locate`` (a :meth:`batch` -> ``[B, C, K, 2]``, e.g. ``VLA.keypoints``) over
        every frame once and keep its keypoints instead of the images or features: :meth:`batch` then returns them
        under ``"keypoints"`` (``agent.expert_updates``: the action expert trained on what the frozen head sees)."""
        with torch.no_grad():
            self.keypoints = torch.cat([locate(self.batch(torch.arange(i, min(i + chunk, len(self))))).float().cpu()
                                        for i in range(0, len(self), chunk)])
        self.features, self.images = None, {}

    def batch(self, index: torch.Tensor, seen: torch.Tensor | None = None) -> dict:
        """Frames ``index [B]`` as ``{"images": {camera: uint8 [B, 3, H, W]}, "tokens": int64 [B, L],
        "token_mask": bool [B, L], "state": [B, S], "action": [B, H, A], "action_is_pad": bool [B, H]}``, plus
        ``"target": [B, ...]`` with a ``target_key``; after :meth:`cache_features`, ``"image_features": {camera: float16
        [B, F, h, w]}`` in place of ``"images"``; after :meth:`cache_keypoints`, ``"keypoints": [B, C, K, 2]`` in
        place of both. ``seen [B]``: the frames whose images (and target, where the images show it) go with each
        state (default ``index``; :meth:`sample`'s ``image_lag``)."""
        task = self.task_index[index]
        seen = index if seen is None else seen
        if self.keypoints is not None:
            images = {"keypoints": self.keypoints[seen]}
        elif self.features is not None:
            images = {"image_features": {cam: f[seen] for cam, f in self.features.items()}}
        else:
            images = {"images": {cam: frames[seen] for cam, frames in self.images.items()}}
        target = {} if self.target is None else {"target": self.target[seen]}
        return {
            **images,
            **target,
            "tokens": self.tokens[task],
            "token_mask": self.token_mask[task],
            "state": self.state[index],
            "action": self.action[self.chunk_rows[index]],
            "action_is_pad": self.chunk_pad[index],
        }

    def chunk_residual(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``[N, H, A]``: every frame's chunk ``action[t + k]`` minus the anchor of its state,
        ``state[t] @ weight.T + bias`` (``weight [A, S]``, ``bias [A]``)."""
        return self.action[self.chunk_rows] - (self.state @ weight.T + bias).unsqueeze(1)

    def motion_weights(self, weight: torch.Tensor, bias: torch.Tensor, boost: float) -> torch.Tensor:
        """``[N]`` sampling weights ``1 + boost * m / mean(m)``, ``m`` a frame's mean absolute :meth:`chunk_residual`
        over its steps and dims, each dim divided by its std: frames whose chunk moves away from the held pose (a
        reach's first steps) weigh more than frames holding still."""
        residual = self.chunk_residual(weight, bias)
        scale = residual.std(dim=(0, 1)).clamp_min(1e-6)
        m = (residual / scale).abs().mean(dim=(1, 2))
        return 1.0 + boost * m / m.mean().clamp_min(1e-12)

    def sample(self, batch_size: int, generator: torch.Generator | None = None,
               weights: torch.Tensor | None = None, shift: int = 0, image_lag: int = 0) -> dict:
        """:meth:`batch` of ``batch_size`` frames drawn with replacement: uniformly, or in proportion to ``weights``
        ``[N]`` (e.g. :meth:`motion_weights`); every image moved by :func:`random_shift` of up to ``shift`` pixels;
        with ``image_lag``, each frame's images are those of ``0..image_lag`` frames before (uniform, not before its
        episode's first), as a deployed policy sees its cameras' latest frames beside a newer joint state."""
        if weights is None:
            index = torch.randint(0, len(self), (batch_size,), generator=generator)
        else:
            index = torch.multinomial(weights, batch_size, replacement=True, generator=generator)
        seen = None
        if image_lag > 0:
            lag = torch.randint(0, image_lag + 1, (batch_size,), generator=generator)
            seen = torch.maximum(index - lag, self.episode_start[index])
        batch = self.batch(index, seen)
        if shift > 0 and "images" in batch:
            batch["images"] = {cam: random_shift(im, shift, generator) for cam, im in batch["images"].items()}
        return batch


def batch_to(batch: dict, device: torch.device | str) -> dict:
    """A :meth:`VLABatches.batch` with every tensor (nested per camera too) on ``device``."""
    return {k: ({c: x.to(device) for c, x in v.items()} if isinstance(v, dict) else v.to(device))
            for k, v in batch.items()}


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """DrQ's augmentation: each image ``[B, C, H, W]`` padded by ``pad`` pixels (edge replicated) and cropped back
    to ``H x W`` at a random offset in ``0..2*pad`` per axis, i.e. shifted by up to ``pad`` pixels each way."""
    b, _, h, w = images.shape
    padded = torch.nn.functional.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(b, images.shape[1], h, w + 2 * pad)
    cropped = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(b, images.shape[1], h, w)
    return cropped.gather(3, cols).to(images.dtype)
