"""Record demos in sim (scripted experts, exported policies) and replay them open-loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import sim
from robot_rl.cli import main
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.data.lerobot.features import numpy_to_column
from robot_rl.demos.recorder import expert_policy, observation_policy, record
from robot_rl.demos.replay import replay
from robot_rl.deploy.artifact import ArtifactError
from sim.errors import SimInputError

SHORT = {"episode_s": 1.0}  # 25 control steps at 25 Hz


def record_reach(root: Path, episodes: int = 3, **kwargs) -> LeRobotDataset:
    kwargs.setdefault("overrides", SHORT)
    record(
        "so101_reach", expert_policy, root, episodes, "reach the target", num_envs=2, seed=3, **kwargs
    )
    return LeRobotDataset(root)


def test_reach_expert_succeeds() -> None:
    env = sim.make_env("so101_reach", num_envs=8, seed=5, **SHORT)
    env.reset(seed=5)
    assert env.has_expert
    for _ in range(env.max_episode_steps - 1):
        step = env.step(env.expert_action())
    assert step.info["success"].float().mean().item() >= 7 / 8


def test_a_task_without_an_expert_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ant = sim.make_env("ant", num_envs=1)
    assert not ant.has_expert
    with pytest.raises(SimInputError, match="no scripted expert"):
        ant.expert_action()
    with pytest.raises(ValueError, match="task 'ant' has no scripted expert"):
        record("ant", expert_policy, tmp_path / "ant", 1, "walk")
    assert not (tmp_path / "ant").exists()


def test_recorded_frames_are_consistent(tmp_path: Path) -> None:
    ds = record_reach(tmp_path / "reach")
    assert (ds.num_episodes, len(ds), ds.tasks, ds.fps) == (3, 75, ["reach the target"], 25)
    env = sim.make_env("so101_reach", num_envs=1, **SHORT)
    default, scale = env.default_joint_pos.numpy(), env.robot.control.action_scale
    for ep in range(ds.num_episodes):
        data = ds.episode(ep)
        assert data["next.done"].tolist() == [False] * 24 + [True]
        assert data["next.success"][-1]
        # action = PD targets = default + action_scale * raw action (within the joint limits here)
        np.testing.assert_allclose(data["action"], default + scale * data["action.policy"], atol=1e-6)
        # the policy observation starts with joint_pos = q - default
        np.testing.assert_allclose(data["observation.policy"][:, :6], data["observation.state"] - default, atol=0.011)
        np.testing.assert_array_equal(data["sim.qpos"].astype(np.float32), data["observation.state"])
    assert ds.features["observation.state"].names[0] == "shoulder_pan.pos"


def test_demos_as_rl_transitions(tmp_path: Path) -> None:
    from robot_rl.data.transitions import demo_transitions

    record_reach(tmp_path / "reach", episodes=2)
    tr = demo_transitions(tmp_path / "reach")
    n = 50
    assert tr["obs"].shape == (n, 21) and tr["action"].shape == (n, 6) and tr["reward"].shape == (n,)
    # within an episode the next observation is the following frame's observation, exactly
    for ep in (0, 1):
        rows = np.flatnonzero(tr["episode"] == ep)
        np.testing.assert_array_equal(tr["next_obs"][rows[:-1]], tr["obs"][rows[1:]])
        # time-limit ends are truncations (bootstrap), never terminations
        assert tr["truncated"][rows].tolist() == [False] * 24 + [True] and not tr["terminated"][rows].any()
    # the last next_obs is the pre-reset observation: close to the previous frame, not a fresh reset pose
    last = np.flatnonzero(tr["episode"] == 0)[-1]
    assert np.abs(tr["next_obs"][last, :6] - tr["obs"][last, :6]).max() < 0.1


def test_replay_reproduces_the_recording_and_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "reach"
    record_reach(root)
    for ep in range(3):
        report = replay(root, ep)
        assert report.steps == 25 and report.recorded_success and report.replayed_success
        assert report.max_abs.max() < 1e-5, report.table()
    # Negative control: the same replay from a perturbed first state no longer matches.
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    ds = LeRobotDataset(root)
    qpos = ds.column("sim.qpos").copy()
    qpos[ds.episode_range(1)[0], 1] += 0.05  # shoulder_lift starts 0.05 rad off
    column = numpy_to_column(qpos, ds.features["sim.qpos"])
    pq.write_table(table.set_column(table.schema.get_field_index("sim.qpos"), "sim.qpos", column), path)
    report = replay(root, 1)
    assert report.max_abs[1] > 1e-3


def test_replay_restores_randomised_physics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import robot_rl.demos.replay as replay_module
    from sim.randomization import DomainRandCfg

    rand = DomainRandCfg(
        friction_scale=(0.5, 1.5), mass_scale=(0.6, 1.4), actuator_gain_scale=(0.5, 1.5), action_delay_steps=2
    )
    root = tmp_path / "rand"
    record_reach(root, episodes=2, overrides={**SHORT, "randomization": rand})
    ds = LeRobotDataset(root)
    gains = [ds.episode(e)["sim.actuator_gain"][0] for e in range(2)]
    assert not np.allclose(gains[0], gains[1])  # each episode drew its own physics
    for ep in range(2):
        assert replay(root, ep).max_abs.max() < 1e-5
    # Negative control: without restoring the draws, the replay drifts.
    monkeypatch.setattr(replay_module, "recorded_draws", lambda data: {})
    assert max(replay(root, ep).max_abs.max() for ep in range(2)) > 1e-3


def test_record_and_replay_commands(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    args = [
        "record",
        "--task",
        "so101_reach",
        "--episodes",
        "2",
        "--num-envs",
        "2",
        "--override",
        "episode_s=0.6",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert "recorded 2 episodes (30 frames)" in capsys.readouterr().out
    assert main(args) == 2 and "--overwrite" not in capsys.readouterr().out  # refuses to overwrite
    assert main(["replay", str(out), "--episode", "1", "--max-error", "1e-5"]) == 0
    assert "success: recorded True, replayed True" in capsys.readouterr().out
    assert main(["replay", str(out), "--episode", "5"]) == 2
    assert "episode 5 out of range" in capsys.readouterr().err


def test_record_with_an_exported_policy(tmp_path: Path) -> None:
    from robot_rl.export import PolicyHead, export_policy, make_meta

    env = sim.make_env("so101_reach", num_envs=1, **SHORT)
    meta = make_meta(
        "so101",
        env.robot.joint_names,
        env.default_joint_pos.tolist(),
        env.observation_layout["policy"],
        env.robot.control.action_scale,
        25.0,
        task="so101_reach",
    )
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(env.observation_dims["policy"], 6), torch.nn.Tanh())
    artifact = export_policy(PolicyHead(net, meta), meta, tmp_path / "policy", formats=("onnx",))
    from robot_rl.deploy.policies import artifact_policy

    record(
        "so101_reach",
        observation_policy(artifact_policy(artifact, env.robot.joint_names, env.observation_dims["policy"])),
        tmp_path / "ds",
        1,
        "reach",
        num_envs=2,
        overrides=SHORT,
        source=f"policy:{artifact}",
    )
    data = LeRobotDataset(tmp_path / "ds").episode(0)
    with torch.no_grad():
        expected = net(torch.tensor(data["observation.policy"])).numpy()
    np.testing.assert_allclose(data["action.policy"], expected, atol=1e-5)
    with pytest.raises(ArtifactError, match="observations of size"):  # an artifact of another task
        artifact_policy(artifact, env.robot.joint_names, env.observation_dims["policy"] + 1)


@pytest.mark.render
def test_camera_recording_and_side_by_side_video(tmp_path: Path) -> None:
    import av

    root = tmp_path / "cam"
    record("so101_reach", expert_policy, root, 1, "reach", camera=(64, 64), overrides={"episode_s": 0.2})
    ds = LeRobotDataset(root)
    frames = ds.episode_frames(0, "observation.images.front")
    assert frames.shape == (5, 64, 64, 3) and 20 < frames.mean() < 235  # a rendered scene, not a blank frame
    report = replay(root, 0, video=tmp_path / "sbs.mp4", video_size=(64, 64))
    assert report.max_abs.max() < 1e-5
    with av.open(str(tmp_path / "sbs.mp4")) as container:
        video = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(video) == 5 and video[0].shape == (64, 128, 3)
    # left (recorded camera) and right (replayed render) show the same scene
    assert np.abs(video[2][:, :64].astype(float) - video[2][:, 64:]).mean() < 8


def test_replay_of_a_dataset_without_sim_state(tmp_path: Path) -> None:
    """A dataset with only joint states and joint targets (as recorded off sim) replays from rest."""
    from robot_rl.data.lerobot import LeRobotWriter

    source = record_reach(tmp_path / "full", episodes=1)
    data = source.episode(0)
    keep = ("observation.state", "action")
    features = {
        k: {"dtype": f.dtype, "shape": list(f.shape), "names": f.names} for k, f in source.features.items() if k in keep
    }
    with LeRobotWriter.create(tmp_path / "plain", fps=source.fps, features=features) as writer:
        for t in range(len(data["action"])):
            writer.add_frame({k: data[k][t] for k in keep}, task="reach the target")
        writer.save_episode()
    report = replay(tmp_path / "plain", 0, task="so101_reach")
    # joint targets map back to the raw actions; the start pose is the recorded one, at rest
    assert report.steps == 25 and report.recorded_success is None
    assert report.max_abs.max() < 1e-4, report.table()
