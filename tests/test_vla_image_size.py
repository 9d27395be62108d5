"""agent.image_size: a dataset from a camera of another (non-square) size trains a square policy, resampled at load
by the deploy runtime's own rule; without it such a dataset is refused naming the fix.

The non-square dataset is a real LeRobot v3 dataset written by our writer: a recorded so101_reach_lang dataset
(front camera, 32x32) whose frames are stretched to 48x80 (tests/vla_tiny.py). The export of such a run
(``vla.resize: nearest``, camera-sized images at the node) is tested in tests/test_vla_export_run.py, whose run is
trained on the same kind of dataset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from vla_tiny import FRONT, TINY_VLA, record_wide

from robot_rl.compose import compose
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.vla_batches import VLABatches
from robot_rl.deploy.vla_runtime import resize_nearest
from robot_rl.errors import InputError
from robot_rl.models.vla import InstructionTokenizer
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.render

TINY = [*TINY_VLA, "agent.updates=3", "export_formats=[]"]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    return record_wide(tmp_path_factory.mktemp("vla_image_size"))


def test_resize_nearest_of_a_batch_is_each_frame_resized_by_hand():
    frames = np.arange(2 * 3 * 2 * 4, dtype=np.uint8).reshape(2, 3, 2, 4)
    out = resize_nearest(frames, 1, 2)  # row (0 + 0.5) * 2 / 1 -> 1; columns (j + 0.5) * 4 / 2 -> 1, 3
    np.testing.assert_array_equal(out, frames[:, :, [1]][:, :, :, [1, 3]])
    for t in range(2):
        np.testing.assert_array_equal(out[t], resize_nearest(frames[t], 1, 2))


def test_batches_hold_the_frames_resampled_to_the_square(wide: Path):
    ds = LeRobotDataset(wide)
    assert ds.features[FRONT].shape == (48, 80, 3)
    tokenizer = InstructionTokenizer.train(list(ds.tasks), 128)
    batches = VLABatches(wide, tokenizer, chunk_len=4, max_text_len=12, cameras=("front",), image_size=32)
    first = ds.episode_frames(0, FRONT).transpose(0, 3, 1, 2)  # [T, 3, 48, 80]
    assert batches.images["front"].shape == (len(ds), 3, 32, 32) and batches.images["front"].dtype == torch.uint8
    np.testing.assert_array_equal(batches.images["front"][: len(first)].numpy(), resize_nearest(first, 32, 32))
    native = VLABatches(wide, tokenizer, chunk_len=4, max_text_len=12, cameras=("front",))
    assert native.images["front"].shape == (len(ds), 3, 48, 80)


def test_non_square_frames_without_image_size_are_refused_with_the_fix(wide: Path, tmp_path: Path):
    with pytest.raises(InputError, match=r"agent\.image_size=48") as err:
        Runner(compose([*TINY, f"agent.dataset={wide}"]), tmp_path / "run")
    assert "[48, 80]" in str(err.value)


def test_a_policy_size_the_env_does_not_render_is_refused_with_the_fix(wide: Path, tmp_path: Path):
    with pytest.raises(InputError, match=r"task.env.image_size=24"):
        Runner(compose([*TINY, f"agent.dataset={wide}", "agent.image_size=24"]), tmp_path / "run")
