"""Training under the deploy rate limit (``TaskCfg.control.max_step_change``, sim/control.py): the pure limit
on hand values and pinned to its deploy twin, the setting's validation, the env applying it from the reset
pose, snapshots carrying the held command, and a control override merging into a task's own control."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sim
from robot_rl.deploy.safety import rate_limit as deploy_rate_limit
from robot_rl.train.artifact_eval import training_control
from sim.control import override_control, rate_limit, split_rate_limit
from sim.errors import SimInputError
from sim.registry import apply_overrides
from sim.robots import load_robot
from sim.tasks.so101_reach import so101_reach_cfg


def test_rate_limit_hand_values():
    last = torch.tensor([[0.0, 1.0, -1.0]])
    target = torch.tensor([[0.5, 1.05, -2.0]])
    # moves of 0.5, 0.05, -1.0 limited to +-0.1: 0.1, 0.05 (inside), -0.1
    torch.testing.assert_close(rate_limit(target, last, 0.1), torch.tensor([[0.1, 1.05, -1.1]]))


def test_rate_limit_matches_the_deploy_safety_layer():
    rng = np.random.default_rng(0)
    target, last = rng.uniform(-2, 2, (2, 64, 7))
    sim_side = rate_limit(torch.as_tensor(target), torch.as_tensor(last), 0.15).numpy()
    np.testing.assert_allclose(sim_side, deploy_rate_limit(target, last, np.full(7, 0.15)))


def test_split_rate_limit():
    assert split_rate_limit({}) == (None, {})
    assert split_rate_limit({"action_scale": 1.0, "max_step_change": 0.15}) == (0.15, {"action_scale": 1.0})
    assert split_rate_limit({"max_step_change": 1}) == (1.0, {})


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, math.inf, "fast", True, [0.1]])
def test_split_rate_limit_rejects_bad_values(bad):
    with pytest.raises(SimInputError, match=r"control\.max_step_change = .* must be a finite number > 0"):
        split_rate_limit({"max_step_change": bad})


def test_env_limits_each_step_from_the_reset_pose():
    limited = sim.make_env("so101_reach", num_envs=2, seed=0, control={"max_step_change": 0.05})
    free = sim.make_env("so101_reach", num_envs=2, seed=0)
    limited.reset(seed=0)
    free.reset(seed=0)
    start = limited.applied_ctrl.clone()
    torch.testing.assert_close(start, free.applied_ctrl)  # the reset pose's command, before any step
    action = torch.ones(2, limited.action_dim)
    wanted = limited.actuator_command(action)
    moved = []
    for _ in range(3):
        before = limited.applied_ctrl.clone()
        limited.step(action)
        moved.append((limited.applied_ctrl - before).abs().max().item())
    assert max(moved) == pytest.approx(0.05, abs=1e-6)  # far targets: exactly the limit per step
    torch.testing.assert_close(limited.applied_ctrl, torch.minimum(wanted, start + 0.15))
    free.step(action)
    torch.testing.assert_close(free.applied_ctrl, wanted)  # no limit: the target at once


def test_snapshot_carries_the_held_command():
    env = sim.make_env("so101_reach", num_envs=1, seed=0, control={"max_step_change": 0.05})
    env.reset(seed=0)
    env.step(torch.ones(1, env.action_dim))
    snapshot = env.capture_state()
    held = env.applied_ctrl.clone()
    env.step(-torch.ones(1, env.action_dim))
    env.restore_state(snapshot)
    torch.testing.assert_close(env.applied_ctrl, held)


def test_torque_control_refuses_a_rate_limit():
    with pytest.raises(SimInputError, match="torque-controlled"):
        sim.make_env("so101_reach", num_envs=1, control={"action_type": "joint_torque", "max_step_change": 0.1})


def test_control_override_merges_into_the_task_control():
    cfg = so101_reach_cfg().replace(control={"action_scale": 0.8})
    merged = apply_overrides(cfg, {"control": {"max_step_change": 0.1}}, "so101_reach")
    assert merged.control == {"action_scale": 0.8, "max_step_change": 0.1}


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, "big", True])
def test_a_bad_action_scale_is_refused(bad):
    with pytest.raises(SimInputError, match=r"control\.action_scale = .* must be a finite number > 0"):
        override_control(load_robot("so101"), {"action_scale": bad})


def test_an_artifact_is_evaluated_with_its_runs_control():
    config = {"task": {"name": "g1_stand_gait", "env": {"control": {"action_scale": 1.0, "max_step_change": 0.15}}}}
    assert training_control(config) == {"action_scale": 1.0, "max_step_change": 0.15}
    for without in ({}, {"task": {"env": {}}}, {"task": None}, {"task": {"env": {"control": None}}}, "x"):
        assert training_control(without) == {}
