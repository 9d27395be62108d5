"""`robot-rl eval <VLA artifact> --image-lag L`: each inference sees the camera images of L control steps before,
beside the current joint positions (as the ROS 2 policy node sees its cameras' latest frames).

The env is the real so101_reach_lang with its front camera rendered at 32x32. The runtime is a stand-in (named
``FrameLog``): it records which images each inference got and plans zero actions, because what is under test is
which rendered frame reaches the policy, not a policy's output (the artifact runtime itself is tested in
tests/test_export_vla.py and tests/test_vla_export_run.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from robot_rl.cli import main
from robot_rl.deploy.artifact import ActionSpec, ChunkExecution
from robot_rl.deploy.chunking import ChunkExecutor
from robot_rl.train.artifact_eval import VLAArtifactPlayer

pytestmark = pytest.mark.render

SO101_REACH_DEPLOY = Path(__file__).parent / "fixtures" / "policies" / "so101_reach_deploy"


def test_steps_to_query_by_hand() -> None:
    ex = ChunkExecutor(2, 4, 1, "open_loop", execute_len=3)
    assert ex.steps_to_query().tolist() == [1, 1]  # nothing planned yet
    ex.step(np.zeros((2, 4, 1)))  # both query now and play action 0 of 3
    assert ex.steps_to_query().tolist() == [3, 3]
    ex.step(np.zeros((0, 4, 1)))
    ex.reset(np.array([True, False]))
    assert ex.steps_to_query().tolist() == [1, 2]  # the reset env queries next; the other after its third action
    assert ChunkExecutor(1, 4, 1, "temporal_ensemble").steps_to_query().tolist() == [1]


class FrameLog:
    """Stand-in runtime (see the module docstring): zero actions as every chunk, each call's image logged."""

    def __init__(self, env, chunk: int, execute_len: int) -> None:
        a = env.action_dim
        self.meta = SimpleNamespace(chunk_length=chunk, action_dim=a,
                                    chunk_execution=ChunkExecution("open_loop", execute_len, 0.0),
                                    action=ActionSpec("joint_position", [1.0] * a, [0.0] * a))
        self.chunk = np.zeros((chunk, a))
        self.seen: list[np.ndarray] = []

    def infer(self, images: dict, instruction: str, joint_pos: np.ndarray) -> np.ndarray:
        self.seen.append(images["front"].copy())
        return self.chunk


@pytest.mark.parametrize("lag", [1, 2])
def test_each_query_sees_the_frame_lag_steps_old_and_a_new_episode_its_first(lag: int) -> None:
    import sim

    env = sim.make_env("so101_reach_lang", num_envs=1, seed=0, cameras=["front"], image_size=32, camera_obs=False)
    obs = env.reset(seed=0)
    log = FrameLog(env, chunk=4, execute_len=3)
    player = VLAArtifactPlayer(log, image_lag=lag)
    rendered = []  # the frame of every step, before its action
    rng = np.random.default_rng(0)
    for _ in range(7):  # queries at steps 0, 3 and 6
        rendered.append(env.camera_images()["front"][0].numpy())
        player.act(env, obs)
        obs = env.step(torch.as_tensor(rng.uniform(-1, 1, (1, env.action_dim)), dtype=torch.float32)).obs
    assert len(log.seen) == 3
    np.testing.assert_array_equal(log.seen[0], rendered[0])  # the episode's first query: its first frame
    for seen, step in zip(log.seen[1:], (3, 6), strict=True):
        np.testing.assert_array_equal(seen, rendered[step - lag])
        assert not np.array_equal(seen, rendered[step])  # the arm moved: the lagged frame is another one
    player.reset(torch.tensor([True]))
    obs = env.reset(seed=1)
    fresh = env.camera_images()["front"][0].numpy()
    player.act(env, obs)
    np.testing.assert_array_equal(log.seen[-1], fresh)  # after a reset: the new scene, never the old one


def test_image_lag_is_refused_for_an_artifact_without_cameras_and_for_a_run(tmp_path: Path, capsys) -> None:
    assert main(["eval", str(SO101_REACH_DEPLOY), "--image-lag", "1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "--image-lag" in err and "VLA" in err, err[-800:]
    (tmp_path / "config.yaml").write_text("task: {}\n")
    assert main(["eval", str(tmp_path), "--image-lag", "1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "export it" in err and "--image-lag" in err, err
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(SO101_REACH_DEPLOY), "--image-lag", "-1", "--episodes", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--image-lag" in err and "Traceback" not in err
