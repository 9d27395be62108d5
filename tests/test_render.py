"""Offscreen rendering (osmesa on CPU) produces non-blank frames and a playable mp4."""

from __future__ import annotations

import av
import numpy as np
import torch

import sim
from sim.render import write_mp4


def test_render_frames_are_not_blank_and_differ_between_envs(tmp_path):
    env = sim.make_env("so101_reach", num_envs=2, seed=0)
    env.reset(seed=0)
    env.step(torch.ones(2, env.action_dim) * torch.tensor([[0.5], [-0.5]]))
    frames = [env.render(i, width=96, height=64) for i in range(2)]
    for frame in frames:
        assert frame.shape == (64, 96, 3) and frame.dtype == np.uint8
        assert frame.std() > 5.0  # not a blank/uniform image
    assert np.abs(frames[0].astype(int) - frames[1].astype(int)).mean() > 0.5
    path = write_mp4(frames * 5, tmp_path / "clip.mp4", fps=25)
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(decoded) == 10 and decoded[0].shape == (64, 96, 3)
    env.close()
