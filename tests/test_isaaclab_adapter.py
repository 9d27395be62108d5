"""IsaacLabVecEnvAdapter against a stand-in with Isaac Lab's step/reset signature (tests/isaaclab_standin.py),
hand-computed values; and the backend's refusals where Isaac Lab (or MuJoCo 4) is missing. The real Isaac
Lab layer is tests/isaaclab/ (marker ``isaaclab``)."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from gymnasium import spaces
from isaaclab_standin import StandInIsaacEnv

import sim
from robot_rl.commands.train import check_overrides
from robot_rl.compose import compose
from robot_rl.errors import InputError
from robot_rl.train.runner import Runner
from sim.errors import SimInputError
from sim.isaaclab_adapter import IsaacLabVecEnvAdapter

pytestmark = pytest.mark.usefixtures("one_thread")


def _adapter(**kwargs) -> tuple[StandInIsaacEnv, IsaacLabVecEnvAdapter]:
    env = StandInIsaacEnv(**kwargs)
    return env, IsaacLabVecEnvAdapter(env, env.reward_manager, env.termination_manager)


def test_attributes_and_groups():
    env, adapter = _adapter()
    assert (adapter.num_envs, adapter.action_dim, adapter.max_episode_steps) == (3, 1, 4)
    assert adapter.dt == pytest.approx(0.1) and adapter.observation_dims == {"policy": 2, "critic": 3}
    assert adapter.action_low.tolist() == [-float("inf")] and adapter.action_high.tolist() == [float("inf")]
    obs = adapter.reset(seed=7)
    assert env.seeds == [7]
    torch.testing.assert_close(obs["critic"], torch.tensor([[0.5, 0, 0.5], [0.6, 0, 0.6], [0.7, 0, 0.7]]))
    no_critic = StandInIsaacEnv(critic=False)
    assert IsaacLabVecEnvAdapter(no_critic).observation_dims == {"policy": 2}  # agents then read policy


def test_termination_truncation_final_obs_reward_terms_and_log_by_hand():
    _, adapter = _adapter()
    adapter.reset(seed=0)
    step = adapter.step(torch.tensor([[-0.9], [-0.2], [0.0]]))  # x -> 0.05 (success), 0.5, 0.7
    # alive 1 * dt; distance -2 * x^2 * dt
    alive, distance = torch.full((3,), 0.1), torch.tensor([-0.0005, -0.05, -0.098])
    torch.testing.assert_close(step.info["reward_terms"]["alive"], alive)
    torch.testing.assert_close(step.info["reward_terms"]["distance"], distance)
    torch.testing.assert_close(step.reward, alive + distance)
    torch.testing.assert_close(step.info["reward_by_group"][:, 0], step.reward)
    assert step.terminated.tolist() == [True, False, False] and step.truncated.tolist() == [False] * 3
    assert step.info["success"].tolist() == [True, False, False]
    torch.testing.assert_close(step.info["final_obs"]["policy"][0], torch.tensor([0.05, 1.0]))  # pre-reset
    torch.testing.assert_close(step.obs["policy"][0], torch.tensor([0.5, 0.0]))  # post-reset
    log = step.info["log"]
    assert log["episode/return"] == pytest.approx(0.0995) and log["episode/length"] == 1.0
    assert log["episode/success"] == 1.0 and log["isaaclab/Episode_Termination/success"] == 1.0
    assert log["episode_reward/alive"] == pytest.approx(0.1)
    assert log["episode_reward/distance"] == pytest.approx(-0.0005)

    zero = torch.zeros(3, 1)
    first = step
    step = adapter.step(zero)  # nobody ends: Isaac Lab's extras still hold step 1's final_obs and log
    assert first.terminated.tolist() == [True, False, False]  # a copy, not Isaac Lab's reused buffer
    torch.testing.assert_close(first.reward, alive + distance)
    assert step.info["log"] == {}
    torch.testing.assert_close(step.info["final_obs"]["policy"], step.obs["policy"])
    adapter.step(zero)
    step = adapter.step(zero)  # envs 1, 2 reach 4 steps: a time limit is a truncation
    assert step.truncated.tolist() == [False, True, True] and not step.terminated.any()
    # returns: env 1 4 * (0.1 - 0.05) = 0.2, env 2 4 * (0.1 - 0.098) = 0.008
    assert step.info["log"]["episode/return"] == pytest.approx(0.104)
    assert step.info["log"]["episode/length"] == 4.0 and step.info["log"]["episode/success"] == 0.0


def test_clip_actions_bounds_the_action():
    env = StandInIsaacEnv()
    adapter = IsaacLabVecEnvAdapter(env, clip_actions=0.5)
    assert adapter.action_low.tolist() == [-0.5] and adapter.action_high.tolist() == [0.5]
    adapter.reset()
    step = adapter.step(torch.tensor([[-0.9], [0.0], [2.0]]))
    torch.testing.assert_close(step.obs["policy"][:, 0], torch.tensor([0.25, 0.6, 0.95]))
    with pytest.raises(SimInputError, match="clip_actions"):
        IsaacLabVecEnvAdapter(env, clip_actions=0.0)


def test_direct_env_has_one_reward_term_and_no_success():
    env = StandInIsaacEnv()
    adapter = IsaacLabVecEnvAdapter(env)  # a DirectRLEnv: no managers
    adapter.reset()
    step = adapter.step(torch.tensor([[-0.9], [0.0], [0.0]]))
    assert list(step.info["reward_terms"]) == ["reward"] and "success" not in step.info
    torch.testing.assert_close(step.info["reward_terms"]["reward"], step.reward)
    assert "episode/success" not in step.info["log"] and "episode_reward/reward" in step.info["log"]


def test_refusals_name_the_fix():
    with pytest.raises(ValueError, match="compute_final_obs"):
        IsaacLabVecEnvAdapter(StandInIsaacEnv(compute_final_obs=False))
    env = StandInIsaacEnv()
    env.single_observation_space = spaces.Dict({"policy": spaces.Dict({"x": spaces.Box(-1, 1, (1,))})})
    with pytest.raises(SimInputError, match="concatenate_terms=True"):
        IsaacLabVecEnvAdapter(env)
    env.single_observation_space = spaces.Dict({"actor": spaces.Box(-1, 1, (1,))})
    with pytest.raises(SimInputError, match="no 'policy'"):
        IsaacLabVecEnvAdapter(env)
    _, adapter = _adapter()
    adapter.close()
    with pytest.raises(RuntimeError, match="one simulation per process"):
        adapter.reset()
    with pytest.raises(SimInputError, match="use one of mujoco_batch, mujoco_warp, isaaclab"):
        sim.make_env("so101_reach", backend="physx")


@pytest.mark.skipif(importlib.util.find_spec("isaaclab_tasks") is not None, reason="Isaac Lab is installed here")
def test_isaaclab_backend_without_isaaclab_names_the_setup_script():
    with pytest.raises(SimInputError, match=r"\.ci/setup_isaaclab"):
        sim.make_env("Isaac-Cartpole", backend="isaaclab")
    with pytest.raises(InputError, match=r"\.ci/setup_isaaclab"):
        check_overrides(["sim.backend=isaaclab", "task.name=Isaac-Cartpole"])
    with pytest.raises(InputError, match=r"add sim\.backend=isaaclab"):
        check_overrides(["task.name=Isaac-Cartpole"])


def test_our_tasks_without_mujoco_4_say_so():
    """As in an Isaac Lab venv (mujoco 3, no mujoco.batch): sim and the trainer import, our tasks refuse."""
    code = ("import sys; sys.modules['mujoco.batch'] = None\n"
            "import sim, robot_rl.train.runner\n"
            "from sim.errors import SimInputError\n"
            "try:\n    sim.make_env('so101_reach')\nexcept SimInputError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "needs mujoco>=4.0" in out.stdout and "sim.backend=isaaclab" in out.stdout


def test_ppo_trains_and_evaluates_through_the_adapter(tmp_path):
    """The runner end to end on the stand-in (unbounded actions, a second env for the evaluation)."""
    cfg = compose(["agent=ppo", "agent.num_steps_per_env=8", "task.num_envs=4", "task.total_steps=64",
                   "agent.actor_hidden_dims=[16]", "critic.hidden_dims=[16]", "logger=none",
                   "logger.progress=false", "eval_episodes=4", "export_formats=[]"])
    made = []

    def factory(num_envs, seed):
        env = StandInIsaacEnv(num_envs=num_envs, max_episode_length=5)
        made.append(env)
        return IsaacLabVecEnvAdapter(env, env.reward_manager, env.termination_manager)

    result = Runner(cfg, tmp_path, env_factory=factory).learn()
    assert result.env_steps == 64 and result.eval["episodes"] == 4 and len(made) == 2
    logged = set().union(*(json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()))
    assert {"episode_reward/alive", "episode_reward/distance"} <= {k.removeprefix("env/") for k in logged}
