"""Timing of the nodes without DDS: the simulated robot applies a command exactly ``command_latency_s``
after it arrives (at the nearest physics step), and the policy node's loop statistics keep constant memory."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import rclpy
from ros_nodes.stats import TICK_FIELDS, LoopStats
from std_msgs.msg import Float64MultiArray

from ros_nodes import sim_robot_node

pytestmark = pytest.mark.ros


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_sim_robot_applies_a_command_at_the_physics_step_nearest_its_due_time(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(sim_robot_node.time, "monotonic", clock)
    latency, dt = 0.005, 0.004
    context = rclpy.Context()
    rclpy.init(context=context, args=["--ros-args", "-p", "robot:=so101", "-p", f"physics_dt:={dt}",
                                      "-p", "command_topic:=cmd", "-p", "command_type:=std_msgs/msg/Float64MultiArray",
                                      "-p", f"command_latency_s:={latency}"])
    try:
        node = sim_robot_node.SimRobotNode(context=context)
        reference = mujoco.MjData(node.model)
        reference.qpos[:], reference.qvel[:], reference.ctrl[:] = node.data.qpos, node.data.qvel, node.data.ctrl
        target = node.data.ctrl.copy() + np.array([0.3, -0.2, 0.2, 0.1, 0.0, 0.0])

        node._on_timer()  # t0 = 100.0, step 0
        clock.t = 100.0085
        node._on_timer()  # steps 1, 2
        clock.t = 100.0101  # command arrives: due 100.0151 -> nearest step round(3.775) = 4
        node._on_command(Float64MultiArray(data=target.tolist()))
        clock.t = 100.0121
        node._on_timer()  # step 3: the command is not due yet
        np.testing.assert_array_equal(node.data.ctrl, reference.ctrl)
        clock.t = 100.0201
        node._on_timer()  # steps 4, 5: the command takes effect at step 4
        assert node.steps == 5
        due_step = math.floor((0.0101 + latency) / dt + 0.5)
        mujoco.mj_step(node.model, reference, nstep=due_step)
        reference.ctrl[:] = target
        mujoco.mj_step(node.model, reference, nstep=5 - due_step)
        np.testing.assert_array_equal(node.data.qpos, reference.qpos)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_loop_stats_ring_buffer_keeps_the_last_ticks():
    stats = LoopStats(capacity=4)
    for i in range(6):  # ticks 20 ms apart, latency i ms
        stats.tick(1.0 + 0.02 * i, float(i), 0.1, 0.2, float("nan") if i % 2 else 0.05)
    recent = stats.recent()
    assert recent.shape == (4, len(TICK_FIELDS))
    np.testing.assert_allclose(recent[:, 2], [2.0, 3.0, 4.0, 5.0])  # oldest first
    summary = stats.summary()
    assert summary["commands"] == 6 and summary["latency_max_ms"] == 5.0 and summary["latency_min_ms"] == 2.0
    assert summary["period_p50_ms"] == pytest.approx(20.0)
    assert summary["inference_p50_ms"] == pytest.approx(0.05)  # NaN (chunk reused) ticks left out
    stats.sample("watchdog_delay_ms", 3.0)
    assert stats.summary()["watchdog_delay_max_ms"] == 3.0
