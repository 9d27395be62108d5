"""Language tasks (so101_reach_lang, so101_pick_lang): experts, instructions, camera groups, recording."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.recorder import expert_policy, record
from sim.errors import SimInputError
from sim.tasks.so101_pick_lang import INSTRUCTIONS as PICK
from sim.tasks.so101_reach_lang import INSTRUCTIONS as REACH


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _episode_successes(env, target_id: torch.Tensor | None = None) -> torch.Tensor:
    """``[N]`` bool: whether each env's first episode succeeded at some step, driven by the expert
    (aimed at the named target, or at target ``target_id [N]``)."""
    success = torch.zeros(env.num_envs, dtype=torch.bool)
    running = torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        step = env.step(env.expert_action(target_id))
        success |= step.info["success"] & running
        running &= ~(step.terminated | step.truncated)
        if not running.any():
            break
    return success


@pytest.mark.parametrize(("task", "num_envs"), [("so101_reach_lang", 32), ("so101_pick_lang", 32)])
def test_the_expert_succeeds_and_the_instruction_picks_the_target(task: str, num_envs: int) -> None:
    env = sim.make_env(task, num_envs=num_envs, seed=5, nthread=1)
    env.reset(seed=5)
    assert len(set(env.target_id.tolist())) == len(env.instruction_set.targets)  # every colour is asked for
    rate = _episode_successes(env).float().mean().item()
    assert rate >= 0.9, f"{task}: expert succeeded in {rate:.0%} of {num_envs} episodes"
    env.reset(seed=6)
    other = (env.target_id + 1) % len(env.instruction_set.targets)
    assert not _episode_successes(env, other).any(), "the expert aimed at another colour must fail the task"
    env.close()


def test_reset_draws_paraphrases_and_separated_targets() -> None:
    env = sim.make_env("so101_reach_lang", num_envs=64, seed=0, nthread=1)
    texts = env.instructions()
    assert len(texts) == 64 and set(texts) <= set(REACH.table())
    assert len(set(texts)) > 8  # colours times paraphrases
    for text, target in zip(texts, env.target_id.tolist(), strict=True):
        assert REACH.parse(text) == target
    xy = env.targets[..., :2]
    gaps = torch.cdist(xy, xy) + torch.eye(4) * 1.0
    assert gaps.min() >= env.cfg.params["target_min_separation"]
    rows = torch.arange(64)
    assert torch.equal(env.target, env.targets[rows, env.target_id])
    critic_one_hot = env.reset()["critic"][:, -7:-3]  # target_id one-hot sits before ee_to_target [3]
    assert torch.equal(critic_one_hot.argmax(dim=1), env.target_id)
    env.close()


@pytest.mark.parametrize("table", [REACH, PICK], ids=["reach", "pick"])
def test_paraphrases_parse_to_the_same_target(table) -> None:
    for k, colour in enumerate(table.targets):
        parsed = {table.parse(table.text(k, p)) for p in range(len(table.templates))}
        assert parsed == {k}
        assert table.parse(f"Please, {colour.upper()}!") == k
    with pytest.raises(SimInputError, match="names 0"):
        table.parse("pick up the purple cube")
    with pytest.raises(SimInputError, match="names 2"):
        table.parse(f"{table.targets[0]} or {table.targets[1]}")


def test_set_instruction_retargets_and_the_log_splits_success_by_target() -> None:
    env = sim.make_env("so101_reach_lang", num_envs=4, seed=1, nthread=1, episode_s=0.2)
    env.reset(seed=1)
    env.set_instruction("touch the blue sphere")
    assert env.target_id.tolist() == [2] * 4
    assert env.instructions() == ["touch the blue sphere"] * 4
    assert torch.equal(env.target, env.targets[:, 2])
    env.set_instruction("the yellow please", env_ids=[0])
    assert env.target_id.tolist() == [3, 2, 2, 2] and env.instructions()[0] == "reach the yellow target"
    log = {}
    for _ in range(env.max_episode_steps):
        log = env.step(env.expert_action()).info["log"] or log
    assert set(log) >= {"episode/success/yellow", "episode/success/blue"}
    assert "episode/success/red" not in log
    env.close()


def test_a_task_without_cameras_renders_nothing() -> None:
    env = sim.make_env("so101_pick_lang", num_envs=2, nthread=1)
    assert env.image_shapes == {} and set(env.reset()) == {"policy", "critic"}
    with pytest.raises(SimInputError, match="image_size"):
        sim.make_env("so101_pick_lang", image_size=4)
    env.close()


@pytest.mark.render
def test_camera_groups_have_the_stated_layout_and_follow_the_arm() -> None:
    env = sim.make_env("so101_reach_lang", num_envs=2, seed=0, nthread=1, cameras=["front", "wrist"], image_size=32)
    obs = env.reset(seed=0)
    assert env.image_shapes == {"camera_front": (3, 32, 32), "camera_wrist": (3, 32, 32)}
    for name in env.image_shapes:
        assert obs[name].shape == (2, 3, 32, 32) and obs[name].dtype == torch.uint8
        assert obs[name].float().std() > 5  # a picture, not a blank buffer
    first = {name: obs[name].clone() for name in env.image_shapes}
    action = torch.zeros(2, env.action_dim)
    action[:, 0] = 1.0  # swing the shoulder pan
    for _ in range(10):
        step = env.step(action)
    for name in env.image_shapes:
        changed = (step.obs[name].int() - first[name].int()).abs().float().mean()
        assert changed > 1.0, f"{name} did not change as the arm moved"
        assert torch.equal(step.info["final_obs"][name], step.obs[name])  # no env reset in between
    with pytest.raises(SimInputError, match="not in the task's model"):
        sim.make_env("so101_reach_lang", cameras=["side"])
    env.close()


def test_reach_lang_world_cameras_see_every_target_the_task_can_draw() -> None:
    """Each target of the task's table projects inside the front and top frames (5% margin), a sphere >= 3 px wide
    at 64x64: a policy that must find the named target can see it (an earlier front camera saw half of them)."""
    env = sim.make_env("so101_reach_lang", num_envs=1, seed=0, nthread=1)
    points = env.target_table.double().numpy()  # [M, 3] world positions
    for name in ("front", "top"):
        cam = env.model.camera(name)
        rotation = env.model.cam_mat0[cam.id].reshape(3, 3)  # columns: camera x (right), y (up), z (backwards)
        rel = (points - env.model.cam_pos0[cam.id]) @ rotation
        depth = -rel[:, 2]
        half = torch.tan(torch.deg2rad(torch.tensor(float(env.model.cam_fovy[cam.id]) / 2))).item()
        x, y = rel[:, 0] / depth / half, rel[:, 1] / depth / half  # in [-1, 1] inside the frame
        assert (depth > 0).all() and (abs(x) < 0.95).all() and (abs(y) < 0.95).all(), name
        width_px = 2 * 0.02 / depth / half * 32
        assert width_px.min() >= 3.0, (name, width_px.min())


@pytest.mark.render
def test_image_position_lands_on_the_named_sphere_in_each_world_camera() -> None:
    """``env.image_position`` projects the named target into ``front`` and ``top``: the rendered pixel there has the
    target's colour (its strongest channel is the colour's), in 8 scenes; the wrist camera moves, so it is refused."""
    env = sim.make_env("so101_reach_lang", num_envs=8, seed=0, nthread=1, cameras=["front", "top"], image_size=64,
                       camera_obs=False)
    env.reset(seed=0)
    assert env.world_cameras() == ("front", "top")
    images, named = env.camera_images(), env.instruction_targets()
    strongest = {"red": 0, "green": 1, "blue": 2}
    for cam in ("front", "top"):
        where = env.image_position(env.get_target(), cam)  # [8, 2] in [-1, 1]
        pixel = ((where + 1.0) / 2.0 * 64 - 0.5).round().long()
        for i, colour in enumerate(named):
            rgb = images[cam][i, :, pixel[i, 1], pixel[i, 0]].int()
            if colour == "yellow":
                assert rgb[0] > 2 * rgb[2] and rgb[1] > 2 * rgb[2], (cam, colour, rgb)
            else:
                assert rgb.argmax() == strongest[colour] and rgb.max() > 1.5 * rgb.min(), (cam, colour, rgb)
    gripper = env.site_positions(env.joint_positions(), "end_effector")  # forward kinematics of the joints
    assert torch.allclose(gripper, env.state.site("end_effector"), atol=1e-6)
    with pytest.raises(SimInputError, match=r"expected \[n, 6\]"):
        env.site_positions(torch.zeros(2, 5), "end_effector")
    behind = env.image_position(torch.tensor([[3.0, 0.0, 0.3]]), "front")  # far behind the front camera
    assert torch.isnan(behind).all()
    with pytest.raises(SimInputError, match="not a world-fixed camera"):
        env.image_position(env.get_target(), "wrist")
    env.close()


def test_shifted_instructions_name_the_next_target_in_the_same_paraphrase() -> None:
    env = sim.make_env("so101_reach_lang", num_envs=6, seed=3)
    env.reset(seed=3)
    named, told = env.instruction_targets(), env.instructions(shift=1)
    colours = list(REACH.targets)
    for right, wrong, colour, p in zip(env.instructions(), told, named, env.paraphrase_id.tolist(), strict=True):
        assert right == REACH.text(colours.index(colour), p)
        assert wrong == REACH.text((colours.index(colour) + 1) % 4, p)
    assert sorted(env.instruction_table()) == sorted(REACH.table())
    assert torch.equal(env.joint_positions(), env.state.joint_pos) and env.cameras == ()
    with pytest.raises(SimInputError, match="renders no camera"):
        env.camera_images()


@pytest.mark.render
def test_camera_images_on_request_equal_the_camera_groups() -> None:
    """camera_obs=false: no camera groups, and camera_images(ids) renders what the groups would show."""
    kwargs = {"num_envs": 3, "seed": 1, "cameras": ["front", "wrist"], "image_size": 32}
    grouped, bare = sim.make_env("so101_reach_lang", **kwargs), sim.make_env("so101_reach_lang", camera_obs=False,
                                                                             **kwargs)
    obs, bare_obs = grouped.reset(seed=1), bare.reset(seed=1)
    assert "camera_front" in obs and not any(k.startswith("camera_") for k in bare_obs) and not bare.image_shapes
    action = torch.full((3, 6), 0.3)
    obs, _ = grouped.step(action).obs, bare.step(action)
    images = bare.camera_images([2, 0])
    assert torch.equal(images["front"], obs["camera_front"][[2, 0]])
    assert torch.equal(images["wrist"], obs["camera_wrist"][[2, 0]])
    with pytest.raises(SimInputError, match="camera_obs"):
        sim.make_env("so101_reach_lang", camera_obs="no")


@pytest.mark.render
def test_after_a_reset_the_camera_groups_show_the_reset_envs() -> None:
    env = sim.make_env("so101_pick_lang", num_envs=2, seed=0, nthread=1, cameras=["front"], image_size=16,
                       episode_s=0.1)
    env.reset(seed=0)
    step = env.step(torch.zeros(2, env.action_dim))
    while not step.truncated.all():
        step = env.step(torch.zeros(2, env.action_dim))
    fresh = env._observations()["camera_front"]  # every env rendered again
    assert torch.equal(step.obs["camera_front"], fresh)
    env.close()


@pytest.mark.render
def test_a_recorded_lang_dataset_keeps_each_episodes_instruction(tmp_path: Path) -> None:
    root = tmp_path / "pick_lang"
    summary = record("so101_pick_lang", expert_policy, root, 3, None, num_envs=3, seed=2,
                     overrides={"episode_s": 0.2, "cameras": ["front"], "image_size": 16})
    assert summary.episodes == 3
    dataset = LeRobotDataset(root)
    tasks = [dataset.episode_task(e) for e in range(3)]
    assert all(PICK.parse(t) in range(3) for t in tasks) and set(tasks) <= set(PICK.table())
    env = sim.make_env("so101_pick_lang", num_envs=3, seed=2, episode_s=0.2)
    env.reset(seed=2)
    assert sorted(tasks) == sorted(env.instructions())  # the envs' first episodes, saved in finishing order
    assert dataset[0]["observation.images.front"].shape[-2:] == (16, 16)
    with pytest.raises(ValueError, match="drop --instruction"):
        record("so101_pick_lang", expert_policy, tmp_path / "x", 1, "lift it")
    env.close()


def test_record_camera_on_a_lang_task_records_the_tasks_own_front_camera(tmp_path: Path, capsys) -> None:
    """``robot-rl record --task <lang task> --camera HxW`` stores the task's ``front`` camera (what training and the
    evaluation render), not a free view under the same key; a non-square size is refused (exit 2), naming the fix."""
    import json

    from robot_rl.cli import main
    from robot_rl.demos.sim_io import SIDECAR

    root = tmp_path / "reach_lang"
    assert main(["record", "--task", "so101_reach_lang", "--episodes", "1", "--num-envs", "1", "--camera", "16x16",
                 "--override", "episode_s=0.2", "--out", str(root)]) == 0
    dataset = LeRobotDataset(root)
    assert [k for k in dataset.features if k.startswith("observation.images.")] == ["observation.images.front"]
    assert json.loads((root / SIDECAR).read_text())["overrides"] == {"episode_s": 0.2, "cameras": ["front"],
                                                                      "image_size": 16}
    env = sim.make_env("so101_reach_lang", num_envs=1, seed=0, episode_s=0.2, cameras=["front"], image_size=16)
    first = env.reset(seed=0)["camera_front"][0].float()  # [3, 16, 16]: the task's camera, as the recorder's env saw it
    recorded = torch.as_tensor(dataset[0]["observation.images.front"]).float()
    recorded = recorded * 255.0 if recorded.max() <= 1.0 else recorded
    assert recorded.shape == first.shape and (recorded - first).abs().mean() < 6.0  # video: lossy by a few levels
    env.close()
    capsys.readouterr()
    assert main(["record", "--task", "so101_reach_lang", "--episodes", "1", "--camera", "16x24",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "not square" in err and "--camera 16x16" in err and not (tmp_path / "x").exists()


def test_replay_of_a_pick_lang_episode_scores_the_recorded_instruction(tmp_path: Path) -> None:
    """Replay restores the episode's instruction (the named cube), so the expert's lift is scored as recorded."""
    from robot_rl.demos.replay import replay

    root = tmp_path / "pick_lang"
    record("so101_pick_lang", expert_policy, root, 2, None, num_envs=2, seed=5, only_success=True)
    dataset = LeRobotDataset(root)
    for episode in range(2):
        report = replay(root, episode)
        assert report.recorded_success and report.replayed_success, (dataset.episode_task(episode), report.table())


def test_a_pick_lang_recording_keeps_the_named_cubes_position_every_frame(tmp_path: Path) -> None:
    """``sim.named_position`` is the named cube's centre in every frame (read back from the frame's ``sim.qpos``),
    and it rises with the cube the expert lifts: what ``agent.target_keypoint`` projects into the cameras."""
    root = tmp_path / "pick_lang"
    record("so101_pick_lang", expert_policy, root, 1, None, num_envs=1, seed=5, only_success=True)
    dataset = LeRobotDataset(root)
    data = dataset.episode(0)
    named = PICK.parse(dataset.episode_task(0))
    env = sim.make_env("so101_pick_lang", num_envs=1, seed=5)
    address = int(env.model.joint(f"cube_{PICK.targets[named]}").qposadr[0])
    cube = data["sim.qpos"][:, address:address + 3]
    assert data["sim.named_position"].shape == (len(cube), 3)
    assert np.allclose(data["sim.named_position"], cube, atol=1e-6)
    lift = env.cfg.params["lift_height"]
    assert data["sim.named_position"][-1, 2] - data["sim.named_position"][0, 2] > 0.8 * lift
    env.close()
