"""The numpy logic behind the ROS demo nodes: fps-grid alignment and replay through the safety layer."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter
from robot_rl.deploy.ros_frames import episode_frames, intersect, ros_features, runs
from robot_rl.deploy.ros_replay import ReplayPlayer, load_episode
from robot_rl.deploy.safety import SafetyConfig

JOINTS = ["a", "b", "c"]
CFG = SafetyConfig(lower=np.full(3, -2.0), upper=np.full(3, 2.0), max_step_change=np.full(3, 0.1),
                   stale_state_timeout=0.2, soft_start_s=0.4)
DT = 0.04


def test_runs_and_intersections_split_on_gaps():
    t = np.array([0.0, 0.1, 0.2, 1.5, 1.6, 3.0])
    assert runs(t, 0.5) == [(0.0, 0.2), (1.5, 1.6), (3.0, 3.0)]
    assert intersect([(0.0, 0.2), (1.5, 1.6)], [(0.1, 1.55)]) == [(0.1, 0.2), (1.5, 1.55)]


def test_episode_frames_hold_state_and_take_the_next_command():
    state_t = np.arange(0, 1.0, 0.01)  # a 100 Hz driver: state = time
    state = np.repeat(state_t[:, None], 3, axis=1)
    cmd_t = np.arange(0.005, 1.0, 0.02)  # 50 Hz commands: command = time + 10
    cmd = np.repeat(cmd_t[:, None] + 10.0, 3, axis=1)
    f = episode_frames((0.1, 0.9), 10, state_t, state, None, cmd_t, cmd)
    assert set(f) == {"observation.state", "action"} and f["action"].shape == (9, 3)
    grid = 0.1 + np.arange(9) / 10
    np.testing.assert_allclose(f["observation.state"][:, 0], grid, atol=0.0101)
    assert np.all(f["observation.state"][:, 0] <= grid + 1e-6)  # never from the future
    # the command in force at t_{k+1}: sent within the frame after observation k
    assert np.all((f["action"][:, 0] - 10.0 > grid) & (f["action"][:, 0] - 10.0 <= grid + 0.1 + 1e-6))
    with pytest.raises(ValueError, match="precedes"):
        episode_frames((-0.5, 0.5), 10, state_t, state, None, cmd_t, cmd)


def ideal_robot_run(player: ReplayPlayer, start: np.ndarray, ticks: int, state_gap: tuple[int, int] = (-1, -1)):
    """An ideal robot that is at the last command one tick later; states stop during ``state_gap``."""
    measured, sent, state_time = start.copy(), [], None
    for k in range(ticks):
        now = k * DT
        if not state_gap[0] <= k < state_gap[1]:
            state_time = now
        command = player.tick(now, measured, state_time)
        sent.append(command)
        if command is not None:
            measured = command.copy()
    return sent


def test_replay_player_soft_starts_respects_limits_and_pauses_when_stale():
    t = np.arange(30)
    actions = np.stack([0.5 + 0.05 * np.sin(t / 5), 0.01 * t, -0.3 + 0 * t], axis=1)
    recorded = np.concatenate([actions[:1], actions[:-1]])  # an ideal robot is at the previous command
    player = ReplayPlayer(actions, recorded, CFG, JOINTS)
    assert player.tick(0.0, None, None) is None  # nothing before the first JointState
    start = np.zeros(3)
    sent = ideal_robot_run(player, start, 80, state_gap=(30, 40))
    cmds = np.array([c for c in sent if c is not None])
    assert np.abs(cmds[0] - start).max() <= 0.1 + 1e-12  # soft start from the measured pose
    assert np.abs(np.diff(cmds, axis=0)).max() <= 0.1 + 1e-12
    report = player.report()
    assert player.phase == "done" and report.played == 30
    assert report.events["stale"] >= 5 and report.events["soft_start"] > 0
    # an ideal robot follows every command; after the stale pause the soft start re-blends to the
    # paused frame's command, so only that frame's recorded error is up to one recorded step
    assert report.command_max.max() < 1e-9
    assert 1e-3 < report.recorded_max.max() <= np.abs(np.diff(actions, axis=0)).max() + 1e-9
    assert "replayed 30/30 frames" in report.table()
    undisturbed = ReplayPlayer(actions, recorded, CFG, JOINTS)
    ideal_robot_run(undisturbed, start, 60)
    assert undisturbed.phase == "done" and undisturbed.report().recorded_max.max() < 1e-9


def test_replay_player_reports_clamped_targets_and_refuses_nan():
    actions = np.full((5, 3), 3.0)  # beyond the 2.0 limit
    player = ReplayPlayer(actions, None, CFG, JOINTS)
    sent = ideal_robot_run(player, np.full(3, 1.95), 30)
    assert max(np.abs(c).max() for c in sent if c is not None) <= 2.0
    assert player.report().events["clamped"] > 0 and player.report().recorded_rms is None
    with pytest.raises(ValueError, match="NaN"):
        ReplayPlayer(np.full((2, 3), np.nan), None, CFG, JOINTS)


def test_load_episode_reorders_and_refuses_other_joints(tmp_path):
    root = tmp_path / "ds"
    order = ["c", "a", "b"]
    with LeRobotWriter.create(root, fps=25, features=ros_features(order, velocity=False)) as w:
        for k in range(4):
            row = np.array([3.0, 1.0, 2.0]) + k
            w.add_frame({"observation.state": row, "action": row + 0.5}, task="t")
        w.save_episode()
    actions, states, fps = load_episode(LeRobotDataset(root), 0, JOINTS)
    assert fps == 25
    np.testing.assert_allclose(actions[0], [1.5, 2.5, 3.5])
    np.testing.assert_allclose(states[3], [4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match="not the robot's"):
        load_episode(LeRobotDataset(root), 0, ["a", "b", "x"])
    with pytest.raises(ValueError, match="out of range"):
        load_episode(LeRobotDataset(root), 1, JOINTS)
