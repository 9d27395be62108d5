"""Datasets written by LeRobot 0.6.1 itself read back equal to their ground truth (*.expected.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lerobot_fixtures import LANG_TINY, REACH_TINY

from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.lerobot.meta import episode_stats_from_row
from robot_rl.data.lerobot.stats import aggregate_dataset, feature_stats

ROOT = REACH_TINY
# Lossy AV1: LeRobot's README for the fixture measured at most 2.19 between decoded and source frame means.
PIXEL_TOL = 3.0


@pytest.fixture(scope="module")
def expected() -> dict:
    if not ROOT.is_dir():
        pytest.fail(f"LeRobot fixtures not found at {ROOT} (tests/fixtures/lerobot_v3, or $ROBOT_RL_FIXTURES)")
    return json.loads((ROOT.parent / "so101_reach_tiny.expected.json").read_text())


@pytest.fixture(scope="module")
def ds() -> LeRobotDataset:
    return LeRobotDataset(ROOT)


def source_frame(t: int, length: int, red: bool) -> np.ndarray:
    """The uint8 frame LeRobot's writer was fed (recipe in the expected JSON's ``generation``)."""
    y, x = np.mgrid[0:64, 0:64]
    frame = np.stack([40 + x // 2, 60 + y // 2, np.full_like(x, min(40 + 4 * t, 255))], axis=-1)
    x0, y0 = round(48 * t / (length - 1)), 8 + (t % 4) * 8
    frame[y0 : y0 + 16, x0 : x0 + 16] = (230, 30, 30) if red else (30, 30, 230)
    return frame.astype(np.uint8)


def test_counts_features_and_tasks(ds: LeRobotDataset, expected: dict) -> None:
    assert ds.fps == expected["fps"]
    assert (ds.num_episodes, len(ds)) == (expected["num_episodes"], expected["total_frames"])
    assert [ds.episodes[e]["length"] for e in range(ds.num_episodes)] == expected["frames_per_episode"]
    assert ds.tasks == expected["tasks"]
    assert [ds.episode_task(e) for e in range(ds.num_episodes)] == expected["episode_tasks"]
    assert ds.info.robot_type == expected["robot_type"]
    for key, spec in expected["features"].items():
        feature = ds.features[key]
        assert (feature.dtype, list(feature.shape), feature.names) == (spec["dtype"], spec["shape"], spec["names"])
    assert ds.info.video_keys == expected["video_keys"]
    assert ds.features["observation.images.front"].info["video.codec"] == expected["video_codec"]


def test_first_and_last_rows_are_exact(ds: LeRobotDataset, expected: dict) -> None:
    for ep in expected["episodes"]:
        data = ds.episode(ep["episode_index"])
        start, stop = ds.episode_range(ep["episode_index"])
        assert [start, stop] == ep["global_index_range"]
        np.testing.assert_array_equal(data["observation.state"][0], np.float32(ep["first_observation_state"]))
        np.testing.assert_array_equal(data["observation.state"][-1], np.float32(ep["last_observation_state"]))
        np.testing.assert_array_equal(data["action"][0], np.float32(ep["first_action"]))
        np.testing.assert_array_equal(data["action"][-1], np.float32(ep["last_action"]))
        # next.reward / next.done: 1 and True on the last frame only; stored as scalar columns.
        assert data["next.reward"].shape == (stop - start,)
        assert data["next.done"].tolist() == [False] * (stop - start - 1) + [True]
        np.testing.assert_array_equal(data["frame_index"], np.arange(stop - start))


def test_getitem_matches_lerobot_shapes_and_pixels(ds: LeRobotDataset, expected: dict) -> None:
    truth = expected["episode0_pixel_means"]
    for name in ("frame_0", "frame_10"):
        item = ds[int(name.split("_")[1])]
        image = item["observation.images.front"]
        assert list(image.shape) == truth[name]["decoded_shape_chw"] and image.dtype == np.float32
        assert float(item["timestamp"]) == pytest.approx(truth[name]["timestamp"])
        assert abs(image.mean() * 255 - truth[name]["decoded_mean_0_255"]) < PIXEL_TOL
        np.testing.assert_allclose(
            image.mean(axis=(1, 2)) * 255, truth[name]["decoded_channel_means_0_255"], atol=PIXEL_TOL
        )
    item = ds[0]
    assert item["next.reward"].shape == () and item["index"].shape == () and item["task"] == expected["tasks"][0]


def test_every_decoded_frame_matches_its_source(ds: LeRobotDataset, expected: dict) -> None:
    worst_mean, worst_pixel = 0.0, 0.0
    for ep in range(ds.num_episodes):
        frames = ds.episode_frames(ep, "observation.images.front").astype(np.float64)
        length, red = len(frames), "red" in ds.episode_task(ep)
        for t, frame in enumerate(frames):
            src = source_frame(t, length, red).astype(np.float64)
            worst_mean = max(worst_mean, abs(frame.mean() - src.mean()))
            worst_pixel = max(worst_pixel, np.abs(frame - src).mean())
    assert worst_mean < PIXEL_TOL
    assert worst_pixel < expected["decode_check_all_frames"]["max_mean_abs_pixel_error_0_255"] + 1.0
    # The recipe is right: frame 0's source mean is the one LeRobot recorded.
    assert source_frame(0, 40, True).mean() == pytest.approx(
        expected["episode0_pixel_means"]["frame_0"]["source_mean_0_255"]
    )


def test_our_stats_reproduce_lerobots(ds: LeRobotDataset) -> None:
    """Per-episode stats recomputed from the parquet equal LeRobot's; aggregation gives its stats.json."""
    numeric = [k for k, f in ds.features.items() if not f.is_visual]
    per_episode = []
    for e, row in enumerate(ds.episodes):
        theirs = episode_stats_from_row(row)
        per_episode.append(theirs)
        data = ds.episode(e)
        for key in numeric:
            ours = feature_stats(data[key])
            for stat in ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99"):
                np.testing.assert_allclose(
                    ours[stat].reshape(-1),
                    theirs[key][stat].reshape(-1),
                    rtol=1e-5,
                    atol=2e-4,
                    err_msg=f"episode {e} {key} {stat}",
                )
            assert ours["count"].tolist() == theirs[key]["count"].tolist()
    aggregated = aggregate_dataset(per_episode)
    for key, stats in ds.stats.items():
        for stat, value in stats.items():
            np.testing.assert_allclose(
                aggregated[key][stat], value, rtol=1e-6, atol=1e-9, err_msg=f"stats.json {key} {stat}"
            )


def test_language_fixture_reads_back_equal_to_lerobots_ground_truth() -> None:
    """so101_lang_tiny: one task per episode (a paraphrase included), rows exact, frames within PIXEL_TOL."""
    expected = json.loads((LANG_TINY.parent / "so101_lang_tiny.expected.json").read_text())
    lang = LeRobotDataset(LANG_TINY)
    assert (lang.fps, lang.num_episodes, len(lang)) == (expected["fps"], expected["num_episodes"],
                                                       expected["total_frames"])
    assert lang.tasks == expected["tasks_in_order"]
    for e, truth in enumerate(expected["episodes"]):
        assert lang.episode_range(e) == tuple(truth["global_index_range"])
        assert lang.episode_task(e) == truth["task"]
        data = lang.episode(e)
        for key, name in (("observation.state", "observation_state"), ("action", "action")):
            np.testing.assert_array_equal(data[key][0], np.float32(truth[f"first_{name}"]))
            np.testing.assert_array_equal(data[key][-1], np.float32(truth[f"last_{name}"]))
    for name in ("frame_0", "frame_10"):
        truth = expected["episode0_pixel_means"][name]
        frame = lang[int(name.split("_")[1])]["observation.images.front"]  # float32 CHW in [0, 1]
        assert list(frame.shape) == truth["decoded_shape_chw"]
        np.testing.assert_allclose(frame.mean(axis=(1, 2)) * 255, truth["source_channel_means_0_255"], atol=PIXEL_TOL)
