"""The env's public state API (docs/tasks.md): capture_state/restore_state round trips bit for bit,
target getter/setter, jacobian accessor."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.backends.base import STATE_FIELDS
from sim.errors import SimInputError
from sim.randomization import DomainRandCfg

RAND = DomainRandCfg(friction_scale=(0.5, 1.5), mass_scale=(0.6, 1.4), actuator_gain_scale=(0.5, 1.5),
                     actuator_delay_s=(0.0, 0.01), action_delay_steps=2)


def _actions(env, steps: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(steps, env.num_envs, env.action_dim, generator=gen) * 2 - 1


def _rollout(env, actions: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    out = []
    for a in actions:
        step = env.step(a)
        assert not (step.terminated | step.truncated).any(), "a reset inside the window draws random numbers"
        out.append({**step.obs, "reward": step.reward})
    return out


def test_state_fields_are_mujocos_integration_state():
    env = sim.make_env("so101_reach", num_envs=2, randomization=RAND)
    state = env.capture_state()
    size = sum(int(np.prod(state.physics[f].shape[1:])) for f in STATE_FIELDS)
    assert size == mujoco.mj_stateSize(env.model, mujoco.mjtState.mjSTATE_INTEGRATION)
    assert state.num_envs == 2 and state.physics["history"].shape[1] > 0  # the actuator delay is in the state
    env.close()


@pytest.mark.parametrize("task", ["so101_reach", "so101_lift", "g1_reach_walk"])
def test_capture_step_restore_replays_bit_for_bit(task):
    env = sim.make_env(task, num_envs=3, seed=1, randomization=RAND, observation_noise=False)
    env.reset(seed=2)
    _rollout(env, _actions(env, 4, seed=0))  # mid-episode: delayed actions in flight, timers running
    snapshot = env.capture_state()
    actions = _actions(env, 6, seed=1)
    first = _rollout(env, actions)
    env.restore_state(snapshot)
    again = _rollout(env, actions)
    for a, b in zip(first, again, strict=True):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    # Negative control: the same restore without the randomiser's draws (other physics) diverges.
    _rollout(env, _actions(env, 3, seed=3))
    snapshot.randomization.clear()
    env.restore_state(snapshot)
    drift = _rollout(env, actions)
    assert not torch.equal(first[-1]["policy"], drift[-1]["policy"])
    env.close()


def test_restore_into_other_env_ids_copies_that_env():
    env = sim.make_env("so101_reach", num_envs=3, randomization=RAND, observation_noise=False)
    env.reset(seed=4)
    _rollout(env, _actions(env, 3, seed=5))
    env.restore_state(env.capture_state([2]), [0])
    assert torch.equal(env.get_target([0]), env.get_target([2]))
    same = torch.rand(env.action_dim)
    for step in _rollout(env, same.expand(5, 3, -1)):
        assert torch.equal(step["policy"][0], step["policy"][2])
        assert not torch.equal(step["policy"][1], step["policy"][2])
    with pytest.raises(SimInputError, match="holds 1 envs"):
        env.restore_state(env.capture_state([1]), [0, 1])
    with pytest.raises(SimInputError, match="out of range"):
        env.capture_state([3])
    env.close()


def test_target_getter_setter_and_distribution():
    env = sim.make_env("so101_reach", num_envs=2)
    assert env.has_target
    table = env.target_distribution()
    assert table.shape[1] == 3 and len(table) > 16
    assert all((table == t).all(dim=1).any() for t in env.get_target())  # resets draw from the table
    env.set_target(torch.tensor([[0.1, 0.2, 0.3]]), [1])
    assert torch.equal(env.get_target(), torch.stack([env.get_target([0])[0], torch.tensor([0.1, 0.2, 0.3])]))
    np.testing.assert_allclose(env.capture_state([1]).physics["mocap_pos"][0, 0], [0.1, 0.2, 0.3], atol=1e-7)
    lift = sim.make_env("so101_lift", num_envs=1)
    assert not lift.has_target
    with pytest.raises(SimInputError, match="has no target"):
        lift.get_target()
    env.close()
    lift.close()


def test_jacobian_matches_mujoco():
    env = sim.make_env("so101_reach", num_envs=2)
    env.reset(seed=3)
    env.step(torch.full((2, env.action_dim), 0.3))
    body = env.model.body("gripper").id
    point = env.state.site("end_effector")
    jacp, jacr = env.jacobian(body, point[1:], env_ids=[1])
    model, data = env.mujoco_view(1)
    expected_p, expected_r = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    mujoco.mj_jac(model, data, expected_p, expected_r, point[1].double().numpy(), body)
    assert jacp.shape == (1, 3, env.model.nv) and jacp.dtype == torch.float64
    np.testing.assert_allclose(jacp[0].numpy(), expected_p, atol=1e-6)
    np.testing.assert_allclose(jacr[0].numpy(), expected_r, atol=1e-6)
    env.close()
