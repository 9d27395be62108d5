"""The MuJoCo Warp backend (``sim.backend=mujoco_warp``) against MuJoCo's CPU batch, on warp's CPU device.

Same seed, same seeded actions -> the same observations, rewards and episode ends as ``mujoco_batch``,
within float32 tolerances (MuJoCo Warp runs in float32, ``mujoco.batch`` in float64; contacts amplify the
difference over an episode, so episodes are short and every env resets several times). Tests marked
``warp`` skip without the ``[gpu]`` extra (tests/conftest.py); the first run compiles warp's kernels
(~80 s per robot on 2 cores, cached in ``$WARP_CACHE_PATH``, default ``~/.cache/warp``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import sim
from robot_rl.compose import compose
from robot_rl.config.schema import SIM_BACKENDS, SimConfig
from robot_rl.errors import InputError
from robot_rl.train.runner import sim_env_factory
from sim.backends import make_backend
from sim.errors import SimInputError
from sim.randomization import DomainRandCfg

OBS_ATOL, REWARD_ATOL = 1e-3, 1e-4
"""Largest |difference| allowed in any observation / reward entry over the runs below (float32 against
float64 physics). Measured: so101_reach 6e-5 / 8e-6, so101_reach_deploy 9e-5 / 1.3e-5 (30 steps),
g1_walk 9e-6 / 1.1e-5. Over full 1 s episodes under
full-range random actions, contacts amplify it to ~0.1 (SO-101) and ~0.04 (G1 reward), hence the short episodes."""


def _pair(task: str, num_envs: int, **overrides):
    return (sim.make_env(task, num_envs, seed=3, **overrides),
            sim.make_env(task, num_envs, seed=3, backend="mujoco_warp", **overrides))


def _compare(task: str, num_envs: int, steps: int, amplitude: float, **overrides):
    """Step both backends with the same seeded actions: ``(worst obs diff, worst reward diff, episode ends,
    the mujoco_batch env, the mujoco_warp env)``.

    Episode ends (terminations and truncations) must agree exactly, env by env.
    """
    batch, warp_env = _pair(task, num_envs, **overrides)
    obs_b, obs_w = batch.reset(), warp_env.reset()
    worst_obs = max((obs_b[g] - obs_w[g]).abs().max().item() for g in obs_b)
    worst_reward, ends = 0.0, 0
    generator = torch.Generator().manual_seed(0)
    for t in range(steps):
        action = amplitude * (2 * torch.rand(num_envs, batch.action_dim, generator=generator) - 1)
        b, w = batch.step(action), warp_env.step(action)
        assert torch.equal(b.terminated, w.terminated) and torch.equal(b.truncated, w.truncated), f"step {t}"
        ends += int((b.terminated | b.truncated).sum())
        worst_obs = max(worst_obs, *((b.obs[g] - w.obs[g]).abs().max().item() for g in b.obs))
        worst_reward = max(worst_reward, (b.reward - w.reward).abs().max().item())
    return worst_obs, worst_reward, ends, batch, warp_env


@pytest.mark.warp
@pytest.mark.parametrize(("task", "num_envs"), [("so101_reach", 8), ("so101_reach_deploy", 4)])
def test_so101_reach_matches_mujoco_batch(task, num_envs):
    # 0.6 s episodes (15 control steps) over 45 steps: every env truncates and resets 3 times. The deploy
    # variant adds per-env actuator delays (MuJoCo's actuator history, seeded at reset with the reset command).
    worst_obs, worst_reward, ends, _, _ = _compare(task, num_envs, 45, 0.3, episode_s=0.6)
    assert ends == 3 * num_envs
    assert worst_obs < OBS_ATOL and worst_reward < REWARD_ATOL, (worst_obs, worst_reward)


@pytest.mark.warp
def test_g1_walk_matches_mujoco_batch():
    # friction randomisation included (the same draws through expand()); 0.4 s episodes (20 steps) over 40 steps.
    worst_obs, worst_reward, ends, batch, warp_env = _compare("g1_walk", 4, 40, 0.3, episode_s=0.4)
    assert ends == 2 * 4
    assert worst_obs < OBS_ATOL and worst_reward < REWARD_ATOL, (worst_obs, worst_reward)
    # the per-env friction draws reached the device model (uploaded at each reset)
    on_device = warp_env.backend.warp_model.geom_friction.numpy()
    drawn = batch.backend.expand("geom_friction")
    assert on_device.shape == drawn.shape and len(np.unique(drawn[:, 0, 0])) == 4
    np.testing.assert_allclose(on_device, drawn, rtol=1e-6)


@pytest.mark.warp
def test_g1_stand_pushes_match_mujoco_batch():
    """Pushes every 5-10 steps (0.1-0.2 s) over 40 steps: the same seeded kicks land in Data.qvel on the device."""
    pushes = DomainRandCfg(friction_scale=(0.6, 1.25), push_interval_s=(0.1, 0.2), push_velocity=0.5)
    worst_obs, worst_reward, ends, batch, warp_env = _compare("g1_stand", 4, 40, 0.3, episode_s=0.4,
                                                               randomization=pushes)
    assert ends == 2 * 4
    assert worst_obs < OBS_ATOL and worst_reward < REWARD_ATOL, (worst_obs, worst_reward)
    torch.testing.assert_close(warp_env.randomizer.push_timer, batch.randomizer.push_timer)


@pytest.mark.warp
def test_snapshots_cross_backends_and_replay_exactly():
    batch, warp_env = _pair("so101_reach", 2, observation_noise=False)
    batch.reset()
    warp_env.reset()
    actions = [0.5 * torch.ones(2, batch.action_dim), -0.5 * torch.ones(2, batch.action_dim)]
    for action in actions:
        batch.step(action)
    # A mujoco_batch snapshot restored into mujoco_warp continues the same trajectory (float32 tolerance).
    warp_env.restore_state(batch.capture_state())
    assert torch.allclose(warp_env.state.site_pos, batch.state.site_pos, atol=1e-6)
    for action in actions:
        assert torch.allclose(warp_env.step(action).obs["policy"], batch.step(action).obs["policy"], atol=1e-3)
    # A mujoco_warp snapshot replays bit for bit on mujoco_warp.
    snapshot = warp_env.capture_state()
    first = [warp_env.step(a).obs["policy"] for a in actions]
    warp_env.restore_state(snapshot)
    assert all(torch.equal(warp_env.step(a).obs["policy"], obs) for a, obs in zip(actions, first, strict=True))
    # Jacobians come from each env's own positions, as mujoco_batch's do.
    body = int(batch.model.site_bodyid[0])
    batch.restore_state(warp_env.capture_state())
    point = batch.state.site_pos[:, 0]
    for got, want in zip(warp_env.jacobian(body, point), batch.jacobian(body, point), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


@pytest.mark.warp
def test_train_config_selects_the_backend():
    from sim.backends.mujoco_warp import MujocoWarpBackend  # needs the extra

    env = sim_env_factory(compose(["sim.backend=mujoco_warp"]))(2, 0)
    assert isinstance(env.backend, MujocoWarpBackend) and env.reset()["policy"].shape[0] == 2


def test_missing_mujoco_warp_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # import mujoco_warp -> ImportError
    monkeypatch.delitem(sys.modules, "sim.backends.mujoco_warp", raising=False)
    env = sim.make_env("so101_reach", 1)
    with pytest.raises(SimInputError, match=r"pip install -e \.\[gpu\]"):
        make_backend("mujoco_warp", env.model, 1, env.robot.joint_names, {}, [], 1, "cpu")


def test_backend_choice_is_checked():
    assert SIM_BACKENDS == sim.registry.BACKENDS
    assert SimConfig(backend="mujoco_warp").backend == "mujoco_warp"
    with pytest.raises(InputError, match=r"sim\.backend"):
        SimConfig(backend="physx")
    with pytest.raises(SimInputError, match="unknown sim backend 'physx'"):
        sim.make_env("so101_reach", 1, backend="physx")
    with pytest.raises(SimInputError, match="mujoco_batch only"):
        sim.make_env("hopper", 1, backend="mujoco_warp")
    with pytest.raises(InputError, match="mujoco_batch only"):  # the runner's refusal (robot-rl exits 2)
        sim_env_factory(compose(["task.name=hopper", "sim.backend=mujoco_warp"]))(1, 0)
