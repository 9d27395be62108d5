"""Per-env domain randomisation through Batch.expand, action latency and noise, under a seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim
from sim.randomization import DomainRandCfg


def _env(seed=0, **rand):
    return sim.make_env("so101_reach", num_envs=4, seed=seed, randomization=DomainRandCfg(**rand))


def test_physics_fields_differ_per_env_and_repeat_under_seed():
    cfg = dict(friction_scale=(0.5, 1.5), mass_scale=(0.8, 1.2), actuator_gain_scale=(0.7, 1.3))
    env = _env(**cfg)
    env.reset(seed=3)
    mass = env.backend.batch.expanded("body_mass").copy()
    friction = env.backend.batch.expanded("geom_friction")[:, :, 0].copy()
    gain = env.backend.batch.expanded("actuator_gainprm")[:, :, 0].copy()
    bias = env.backend.batch.expanded("actuator_biasprm").copy()
    assert len({tuple(np.round(m, 9)) for m in mass}) == 4
    assert len({tuple(np.round(f, 9)) for f in friction}) == 4
    nominal_kp = env.robot.joints[0].kp
    assert gain.min() >= 0.7 * nominal_kp - 1e-6 and gain.max() <= 1.3 * nominal_kp + 1e-6
    np.testing.assert_allclose(bias[:, :, 1], -gain)  # position servo: bias kp follows gain kp
    again = _env(**cfg)
    again.reset(seed=3)
    np.testing.assert_array_equal(again.backend.batch.expanded("body_mass"), mass)


def test_action_latency_delays_the_command():
    env = _env(action_delay_steps=2)
    env.reset(seed=0)
    env.randomizer.action_delay[:] = torch.tensor([0, 1, 2, 2])
    a1 = torch.full((4, env.action_dim), 0.5)
    out1 = env.randomizer.perturb_action(a1)
    out2 = env.randomizer.perturb_action(-a1)
    assert torch.allclose(out1[0], a1[0]) and torch.allclose(out1[1:], torch.zeros(3, env.action_dim))
    assert torch.allclose(out2[0], -a1[0]) and torch.allclose(out2[1], a1[1])
    assert torch.allclose(out2[2], torch.zeros(env.action_dim))


def test_bad_range_is_refused():
    with pytest.raises(ValueError, match="friction_scale"):
        DomainRandCfg(friction_scale=(1.5, 0.5))


def test_actuator_delay_is_per_env_and_delays_the_motor():
    """MuJoCo's actuator delay: env 1 (8 ms) feels a new target later than env 0 (0 ms)."""
    env = sim.make_env("so101_reach", num_envs=4, seed=0, init_joint_noise=0.0,
                       randomization=DomainRandCfg(actuator_delay_s=(0.0, 0.008)))
    env.reset(seed=0)
    delay = env.backend.expand("actuator_delay")
    delay[:, :] = 0.0
    delay[1, :] = 0.008  # two physics steps of 4 ms
    batch = env.backend.batch
    force = batch.bind("actuator_force")
    batch.bind("ctrl")[:] = env.actuator_command(torch.full((4, env.action_dim), 0.5)).numpy()
    batch.step(nstep=1)
    batch.step(nstep=1)  # forces reported are those of the last substep
    saturated = env.robot.joints[0].effort
    assert np.abs(force[0, 0]) == pytest.approx(saturated)  # no delay: the new target acts at once
    # 8 ms delay: still holding the reset target (the history starts at the reset command, not 0)
    assert np.abs(force[1]).max() < 0.5 * saturated
    batch.step(nstep=3)
    assert np.abs(force[1, 0]) == pytest.approx(saturated)
    cfg = DomainRandCfg(actuator_delay_s=(0.002, 0.006))
    env = sim.make_env("so101_reach", num_envs=8, seed=0, randomization=cfg)
    env.reset(seed=1)
    sampled = env.backend.batch.expanded("actuator_delay")[:, 0]
    assert sampled.min() >= 0.002 and sampled.max() <= 0.006 and len(set(np.round(sampled, 9))) == 8
    with pytest.raises(ValueError, match="actuator_delay_s"):
        DomainRandCfg(actuator_delay_s=(0.01, 0.0))


def test_randomization_from_a_mapping_as_configs_give_it():
    env = sim.make_env("so101_reach", num_envs=2, randomization={"actuator_delay_s": [0.0, 0.01]})
    assert env.cfg.randomization == DomainRandCfg(actuator_delay_s=(0.0, 0.01))
    with pytest.raises(ValueError, match="randomization has no setting 'actuator_delay'"):
        sim.make_env("so101_reach", num_envs=2, randomization={"actuator_delay": [0.0, 0.01]})


# ------------------------------------------------------------------ pushes (floating base)

PUSH = {"init_joint_noise": 0.0, "observation_noise": False}


def _g1(**rand):
    return sim.make_env("g1_stand", num_envs=4, seed=0, randomization=DomainRandCfg(**rand), **PUSH)


def test_push_settings_are_checked():
    with pytest.raises(ValueError, match=r"push_interval_s=\(8.0, 5.0\)"):
        DomainRandCfg(push_interval_s=(8.0, 5.0), push_velocity=0.5)
    with pytest.raises(ValueError, match=r"push_velocity=-0\.5"):
        DomainRandCfg(push_interval_s=(5.0, 8.0), push_velocity=-0.5)
    with pytest.raises(ValueError, match="set both"):
        DomainRandCfg(push_interval_s=(5.0, 8.0))
    with pytest.raises(ValueError, match="set both"):
        DomainRandCfg(push_velocity=0.5)
    with pytest.raises(ValueError, match="floating-base"):  # the SO-101 is bolted down
        sim.make_env("so101_reach", num_envs=2, randomization={"push_interval_s": [1.0, 2.0], "push_velocity": 0.5})


@pytest.mark.robot_assets("unitree_g1")
def test_push_timers_are_drawn_in_the_interval_in_control_steps():
    env = _g1(push_interval_s=(0.1, 0.2), push_velocity=0.5)  # dt 0.02 s: 5..10 steps
    env.reset(seed=1)
    timers = env.randomizer.push_timer
    assert env.dt == pytest.approx(0.02) and timers.min() >= 5 and timers.max() <= 10
    env.close()


@pytest.mark.robot_assets("unitree_g1")
def test_a_push_adds_the_drawn_planar_velocity_to_the_base_of_due_envs_only():
    v = 0.5
    env = _g1(push_interval_s=(0.1, 0.2), push_velocity=v)
    env.reset(seed=0)
    rand = env.randomizer
    rand.push_timer[:] = torch.tensor([1, 2, 1, 1000])
    qvel = env.backend.batch.bind("qvel")
    before = qvel.copy()
    replay = torch.Generator().set_state(env.generator.get_state())
    delta = rand.push()
    # hand value: envs 0 and 2 are due; each draws (2u - 1) v for x and y, in env order
    expected = torch.zeros(4, 2)
    expected[[0, 2]] = (2 * torch.rand((2, 2), generator=replay) - 1) * v
    torch.testing.assert_close(delta, expected)
    assert delta.abs().max() <= v and delta[[0, 2]].abs().min() > 0
    change = qvel - before
    np.testing.assert_allclose(change[:, :2], expected.double().numpy(), atol=1e-7)
    assert np.abs(change[:, 2:]).max() == 0.0  # height, angular velocity and joints untouched
    assert rand.push_timer[1] == 1 and rand.push_timer[3] == 999
    assert 5 <= rand.push_timer[0] <= 10 and 5 <= rand.push_timer[2] <= 10  # redrawn after the push
    second = rand.push()
    assert second[1].abs().max() > 0 and second[[0, 2, 3]].abs().max() == 0  # env 1's turn, one step later
    env.close()


@pytest.mark.robot_assets("unitree_g1")
def test_pushes_off_change_nothing_and_a_push_lands_at_its_drawn_step():
    """Without a push the G1 with pushes on follows the pushless one exactly; the step its timer runs out,
    its base velocity jumps away from the pushless one's."""
    quiet = _g1()
    pushed = _g1(push_interval_s=(10.0, 10.0), push_velocity=0.5)
    quiet.reset(seed=0)
    pushed.reset(seed=0)
    assert quiet.randomizer.push() is None
    pushed.randomizer.push_timer[:] = torch.tensor([500, 500, 3, 500])
    zero = torch.zeros(4, quiet.action_dim)
    for t in range(1, 5):
        a, b = quiet.step(zero), pushed.step(zero)
        gap = (quiet.state.qvel - pushed.state.qvel).abs().max(dim=1).values
        if t < 3:
            torch.testing.assert_close(a.obs["policy"], b.obs["policy"], rtol=0, atol=0)
            assert gap.max() == 0.0
        else:
            assert gap[2] > 0.05 and gap[[0, 1, 3]].max() == 0.0, f"step {t}: {gap}"
    quiet.close()
    pushed.close()


@pytest.mark.robot_assets("unitree_g1")
def test_push_timers_travel_with_snapshots():
    env = _g1(push_interval_s=(5.0, 8.0), push_velocity=0.5)
    env.reset(seed=0)
    snap = env.capture_state()
    assert snap.randomization["push_timer"].shape == (4, 1)
    timers = env.randomizer.push_timer.clone()
    env.randomizer.push_timer[:] = 1
    env.restore_state(snap)
    torch.testing.assert_close(env.randomizer.push_timer, timers)
    env.close()
