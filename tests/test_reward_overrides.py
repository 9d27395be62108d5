"""Reward weights from config: ``task.env.rewards={<term>: <weight>}`` changes a task's own terms, checked by hand."""

import math

import pytest
import torch

import sim
from robot_rl.compose import compose
from sim.errors import SimInputError
from sim.task_cfg import override_rewards
from sim.tasks.so101_reach import so101_reach_cfg


def _step(env, seed_action: int = 0):
    env.reset()
    gen = torch.Generator().manual_seed(seed_action)
    return env.step(torch.rand(env.num_envs, env.action_dim, generator=gen) * 2 - 1)


def test_weights_scale_each_term_and_the_sum_by_hand():
    base = sim.make_env("so101_reach", 3, seed=4)
    changed = sim.make_env("so101_reach", 3, seed=4, rewards={"distance": -3.0, "joint_vel": 0.0,
                                                               "reach_fine": {"params": {"std": 0.1}}})
    a, b = _step(base), _step(changed)
    torch.testing.assert_close(b.info["reward_terms"]["distance"], 3.0 * a.info["reward_terms"]["distance"])
    assert torch.all(b.info["reward_terms"]["joint_vel"] == 0.0) and torch.any(a.info["reward_terms"]["joint_vel"] != 0)
    torch.testing.assert_close(b.info["reward_terms"]["action_rate"], a.info["reward_terms"]["action_rate"])
    # reach_fine is exp(-d^2 / std^2)-shaped: a wider std pays more at the same distance, the weight stays 1.0
    assert torch.all(b.info["reward_terms"]["reach_fine"] > a.info["reward_terms"]["reach_fine"])
    torch.testing.assert_close(b.reward, sum(b.info["reward_terms"].values()))
    assert changed.cfg.rewards["reach_fine"].weight == 1.0 and changed.cfg.rewards["reach_fine"].params == {"std": 0.1}


def test_the_task_default_is_untouched():
    cfg = so101_reach_cfg()
    out = override_rewards(cfg.rewards, {"distance": 2}, "so101_reach")
    assert out["distance"].weight == 2.0 and cfg.rewards["distance"].weight == -1.0
    before = cfg.rewards["distance"]
    assert out["distance"].func is before.func and out["distance"].group == before.group


@pytest.mark.parametrize(("change", "message"), [
    ({"distanse": 1.0}, r"no reward term 'distanse'; its terms: \['action_rate', 'command_excess', 'distance'"),
    ({"distance": math.nan}, "weight nan must be a finite number"),
    ({"distance": math.inf}, "weight inf must be a finite number"),
    ({"distance": "big"}, "weight 'big' must be a finite number"),
    ({"distance": True}, "weight True must be a finite number"),
    ({"distance": {"wieght": 1.0}}, "has no setting 'wieght'"),
    ({"reach_fine": {"params": {"sigma": 0.1}}}, r"no parameter 'sigma'; its parameters: \['std'\]"),
])
def test_bad_reward_overrides_name_the_term_and_the_fix(change, message):
    with pytest.raises(SimInputError, match=message):
        sim.make_env("so101_reach", 1, rewards=change)


@pytest.mark.robot_assets("unitree_g1")
def test_reward_weights_compose_from_the_command_line():
    cfg = compose(["task=g1_walk_gait", "+task.env.rewards={feet_air_time:0.0,track_lin_vel_xy:2.0}", "logger=none"])
    env = sim.make_env(cfg.task.name, 1, **dict(cfg.task.env))
    assert env.cfg.rewards["feet_air_time"].weight == 0.0 and env.cfg.rewards["track_lin_vel_xy"].weight == 2.0
    assert env.cfg.rewards["gait_contact"].weight == 0.18  # the gait variant's own terms stay
