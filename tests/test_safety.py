"""Safety layer pure functions against hand-computed values (robot_rl.deploy.safety)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from robot_rl.deploy.safety import (
    SafetyConfig,
    SafetyState,
    clamp_to_limits,
    forget_last_command,
    is_stale,
    latch_estop,
    rate_limit,
    safety_step,
    set_enabled,
    soft_start_blend,
)


def cfg(**kw) -> SafetyConfig:
    base = dict(
        lower=np.array([-1.0, -2.0]),
        upper=np.array([1.0, 2.0]),
        max_step_change=np.array([0.1, 0.2]),
        stale_state_timeout=0.2,
        soft_start_s=1.0,
        estop_mode="hold",
    )
    return SafetyConfig(**{**base, **kw})


def test_small_functions_by_hand():
    c = cfg()
    np.testing.assert_array_equal(clamp_to_limits(np.array([1.5, -3.0]), c.lower, c.upper), [1.0, -2.0])
    limited = rate_limit(np.array([1.0, -0.05]), np.zeros(2), np.array([0.1, 0.2]))
    np.testing.assert_allclose(limited, [0.1, -0.05])
    np.testing.assert_allclose(soft_start_blend(np.zeros(2), np.array([1.0, -2.0]), 0.25, 1.0), [0.25, -0.5])
    np.testing.assert_allclose(soft_start_blend(np.zeros(2), np.ones(2), 5.0, 1.0), [1.0, 1.0])
    assert is_stale(1.0, None, 0.2) and is_stale(1.21, 1.0, 0.2) and not is_stale(1.2, 1.0, 0.2)


def test_nothing_sent_before_first_state():
    out = safety_step(cfg(), SafetyState(), np.array([0.5, 0.5]), None, 0.0, None)
    assert out.command is None and out.events == ("no_state",)


def test_soft_start_then_rate_limit_then_tracking():
    c, st = cfg(soft_start_s=1.0), SafetyState()
    measured = np.array([0.0, 0.0])
    policy = np.array([0.4, 1.0])
    # t=0: alpha 0 -> the measured pose itself
    out = safety_step(c, st, policy, measured, 0.0, 0.0)
    np.testing.assert_allclose(out.command, [0.0, 0.0])
    assert "soft_start" in out.events
    # t=0.5: blend = [0.2, 0.5]; rate limit from [0, 0] by [0.1, 0.2] -> [0.1, 0.2]
    out = safety_step(c, out.state, policy, measured, 0.5, 0.5)
    np.testing.assert_allclose(out.command, [0.1, 0.2])
    assert "rate_limited" in out.events
    # after the soft start every step moves by at most max_step until the target is reached
    cmds = []
    st = out.state
    for k in range(10):
        out = safety_step(c, st, policy, measured, 1.0 + 0.04 * k, 1.0 + 0.04 * k)
        st = out.state
        cmds.append(out.command)
    steps = np.abs(np.diff(np.array([[0.1, 0.2], *cmds]), axis=0))
    assert np.all(steps <= c.max_step_change + 1e-12)
    np.testing.assert_allclose(cmds[-1], policy)


def test_limits_clamp_policy_target():
    c = cfg(soft_start_s=0.0, max_step_change=np.array([10.0, 10.0]))
    out = safety_step(c, SafetyState(), np.array([5.0, -5.0]), np.zeros(2), 0.0, 0.0)
    np.testing.assert_allclose(out.command, [1.0, -2.0])
    assert "clamped" in out.events


def test_nan_target_holds_last_command():
    c = cfg(soft_start_s=0.0)
    out = safety_step(c, SafetyState(), np.array([0.05, 0.05]), np.zeros(2), 0.0, 0.0)
    held = out.command.copy()
    for bad in (np.array([np.nan, 0.0]), np.array([0.0, np.inf])):
        out = safety_step(c, out.state, bad, np.zeros(2), 0.04, 0.04)
        np.testing.assert_array_equal(out.command, held)
        assert out.events == ("nan",)


def test_a_reset_under_the_node_forgets_the_last_command_but_not_the_soft_start():
    """sim2sim's episode reset moved the arm from the last command [0.8, 1.5] back to [0, 0]: after
    forget_last_command nothing is held (no target: no command, the driver keeps its own), and the next target
    [0.5, 0.5] is rate-limited from the measured [0, 0] by [0.1, 0.2] -> [0.1, 0.2], not from [0.8, 1.5]; the soft
    start that ended long ago does not begin again."""
    c = cfg(soft_start_s=1.0)
    st = SafetyState(last_command=np.array([0.8, 1.5]), ramp_from=np.zeros(2), ramp_start=-10.0)
    held = safety_step(c, st, None, np.zeros(2), 5.0, 5.0)
    np.testing.assert_array_equal(held.command, [0.8, 1.5])  # without the reset the old pose is held
    st = forget_last_command(st)
    out = safety_step(c, st, None, np.zeros(2), 5.0, 5.0)
    assert out.command is None and out.events == ("no_policy",)
    out = safety_step(c, out.state, np.array([0.5, 0.5]), np.zeros(2), 5.04, 5.04)
    np.testing.assert_allclose(out.command, [0.1, 0.2])
    assert "soft_start" not in out.events and "rate_limited" in out.events


def test_stale_state_holds_and_resumes_with_soft_start():
    c = cfg(soft_start_s=1.0, max_step_change=np.array([1.0, 1.0]))
    st = SafetyState(last_command=np.array([0.3, 0.3]), ramp_from=np.zeros(2), ramp_start=-10.0)
    out = safety_step(c, st, np.array([0.9, 0.9]), np.array([0.3, 0.3]), 1.0, 0.75)  # 0.25 s > 0.2 s
    np.testing.assert_array_equal(out.command, [0.3, 0.3])
    assert out.events == ("stale",) and out.state.stale
    # state resumes: the soft start restarts from the held pose, so the first command is the held pose
    out = safety_step(c, out.state, np.array([0.9, 0.9]), np.array([0.3, 0.3]), 1.1, 1.1)
    np.testing.assert_allclose(out.command, [0.3, 0.3])
    out = safety_step(c, out.state, np.array([0.9, 0.9]), np.array([0.3, 0.3]), 1.6, 1.6)
    np.testing.assert_allclose(out.command, [0.6, 0.6])  # half-way after 0.5 s of 1 s


def test_estop_latches_until_enabled():
    c = cfg(soft_start_s=0.0)
    out = safety_step(c, SafetyState(), np.array([0.05, 0.0]), np.zeros(2), 0.0, 0.0)
    st = latch_estop(out.state, np.zeros(2))
    for k in range(5):  # policy keeps pushing, the measured pose drifts: the command stays put
        out = safety_step(c, st, np.array([1.0, 1.0]), np.array([0.01 * k, 0.0]), 0.04 * k, 0.04 * k)
        st = out.state
        np.testing.assert_array_equal(out.command, [0.05, 0.0])
        assert out.events == ("estop",)
    st = set_enabled(st, True)
    assert not st.estopped
    out = safety_step(c, st, np.array([1.0, 1.0]), np.array([0.04, 0.0]), 1.0, 1.0)
    np.testing.assert_allclose(out.command, [0.14, 0.2])  # rate limited from the measured pose


def test_estop_damp_follows_measured_and_disable_sends_nothing():
    c = cfg(estop_mode="damp")
    st = latch_estop(SafetyState(), np.zeros(2))
    out = safety_step(c, st, np.array([1.0, 1.0]), np.array([0.3, -0.1]), 0.0, 0.0)
    np.testing.assert_array_equal(out.command, [0.3, -0.1])
    out = safety_step(c, set_enabled(SafetyState(), False), np.ones(2), np.zeros(2), 0.0, 0.0)
    assert out.command is None and out.events == ("disabled",)


def test_config_from_robot_yaml_and_bad_values():
    robot = yaml.safe_load(open("hardware/so101/robot.yaml"))
    c = SafetyConfig.from_robot(robot)
    assert c.lower.shape == (6,) and c.max_step_change[0] == pytest.approx(0.1) and c.estop_mode == "hold"
    with pytest.raises(ValueError, match="'freeze'"):
        cfg(estop_mode="freeze")
    with pytest.raises(ValueError, match="lower < upper"):
        cfg(lower=np.array([1.0, -2.0]))
