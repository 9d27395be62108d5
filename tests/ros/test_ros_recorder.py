"""The demo recorder node over real DDS: a probe in the test plays the robot driver and the teleoperator.

The probe publishes JointState (joint order reversed, values that encode the publish time) at
200 Hz and Float64MultiArray commands at 50 Hz; the recorder runs as its own process with the
parameters `robot-rl record --source ros` generates, and writes a real LeRobot v3.0 dataset.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from ros_support import Probe, fresh_domain_id
from std_msgs.msg import Float64MultiArray

from robot_rl.data.lerobot import LeRobotDataset, LeRobotWriter
from robot_rl.demos.ros_launch import DemoNodes, write_demo_params
from sim.robots import load_robot

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
JOINTS = ROBOT.joint_names
FPS = 20
RATE = 0.2  # rad/s: every joint ramps at this rate, so a value tells when it was published
OFFSET = 0.01 * np.arange(len(JOINTS))  # joint j = ramp + 0.01 j: checks the reordering by name
COMMAND_LEAD = 0.5  # the command is the state ramp + 0.5 rad


class Driver:
    """Probe + a 50 Hz command publisher thread; ``on`` switches both streams."""

    def __init__(self, domain: int) -> None:
        self.domain = domain
        self.probe = Probe(domain, JOINTS[::-1])
        self.t0 = time.monotonic()
        self.probe.state_fn = None
        self.on = False
        self.pub = self.probe.node.create_publisher(Float64MultiArray, "forward_position_controller/commands", 10)
        self.running = True
        self.thread = threading.Thread(target=self._commands, daemon=True)
        self.thread.start()

    def ramp(self, t: float) -> np.ndarray:
        return RATE * (t - self.t0) + OFFSET

    def set(self, on: bool) -> None:
        self.on = on
        self.probe.state_fn = (lambda t: self.ramp(t)[::-1]) if on else None

    def _commands(self) -> None:
        while self.running:
            if self.on:
                self.pub.publish(Float64MultiArray(data=(self.ramp(time.monotonic()) + COMMAND_LEAD).tolist()))
            time.sleep(0.02)

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=2)
        self.probe.close()


@pytest.fixture
def driver():
    d = Driver(fresh_domain_id())
    yield d
    d.close()


def start_recorder(tmp_path, driver: Driver, **params) -> DemoNodes:
    params_file = write_demo_params(ROBOT.as_dict(), tmp_path / "params.yaml")
    domain = driver.domain
    nodes = DemoNodes([("recorder_node", "demo_recorder", {"dataset": str(tmp_path / "ds"), "fps": FPS,
                                                             "task": "follow the ramp", **params})],
                      params_file, domain, tmp_path / "logs")
    assert nodes.wait_log("demo_recorder", "recording so101", 60), nodes.log("demo_recorder")
    return nodes


def test_recorder_splits_on_gaps_and_aligns_state_and_command(tmp_path, driver):
    nodes = start_recorder(tmp_path, driver, max_gap_s=0.3, max_episodes=2)
    try:
        on_s = []  # how long each burst really streamed: the wait for the log line adds to the 1 s under load
        for ep in range(2):  # two bursts of ~1 s, each ended by a silence of both streams
            start = time.monotonic()
            driver.set(True)
            assert nodes.wait_log("demo_recorder", f"episode {ep} started", 30), nodes.log("demo_recorder")
            time.sleep(1.0)
            driver.set(False)
            on_s.append(time.monotonic() - start)
            assert nodes.wait_log("demo_recorder", f"saved episode {ep} ", 10), nodes.log("demo_recorder")
        assert nodes.wait("demo_recorder", 20) == 0, nodes.log("demo_recorder")
    finally:
        nodes.stop()
    log = nodes.log("demo_recorder")
    assert "saved episode 1" in log and "max_episodes" in log, log
    root = tmp_path / "ds"
    ds = LeRobotDataset(root)  # runs LeRobot's structural checks
    assert ds.fps == FPS and ds.num_episodes == 2
    assert ds.features["observation.state"].names == [f"{j}.pos" for j in JOINTS]
    assert ds.episode_task(0) == "follow the ramp"
    for ep in range(2):
        e = ds.episode(ep)
        state, action = e["observation.state"], e["action"]
        n = len(state)
        # the burst (>= 1 s, longer by the log wait); the silence before the gap detection is cut
        assert 0.8 * FPS <= n <= on_s[ep] * FPS + 2, (n, on_s)
        # reordered by joint name: joint j carries the ramp + 0.01 j
        np.testing.assert_allclose(state - state[:, :1], np.broadcast_to(OFFSET, state.shape), atol=1e-5)
        # sampled on the fps grid: the ramp advances RATE / FPS per frame (200 Hz driver, timer jitter)
        steps = np.diff(state[:, 0])
        assert abs(float(np.median(steps)) - RATE / FPS) < 0.25 * RATE / FPS, steps
        # action[k] is the command in force at t_{k+1}: the state ramp + lead + about one frame
        lead = action[:-1, 0] - state[:-1, 0] - COMMAND_LEAD
        assert abs(float(np.median(lead)) - RATE / FPS) < 0.5 * RATE / FPS, lead
        assert np.all(e["observation.velocity"] == 0.0)  # the probe publishes zero velocities


def test_recorder_killed_keeps_saved_episodes(tmp_path, driver):
    nodes = start_recorder(tmp_path, driver, episode_s=0.5)
    try:
        driver.set(True)
        assert nodes.wait_log("demo_recorder", "saved episode 1 ", 30), nodes.log("demo_recorder")
        time.sleep(0.3)  # inside episode 2 (or saving it)
        assert nodes.kill("demo_recorder") != 0
    finally:
        nodes.stop()
    root = tmp_path / "ds"
    writer = LeRobotWriter.resume(root)  # drops whatever the kill left half-written
    writer.close()
    ds = LeRobotDataset(root)  # runs LeRobot's structural checks
    assert ds.num_episodes >= 2
    lengths = [ds.episode_range(e)[1] - ds.episode_range(e)[0] for e in range(ds.num_episodes)]
    # episode_s = 0.5 s at 20 fps; a stall of the loaded machine longer than max_gap_s may end one earlier
    assert all(2 <= n <= FPS // 2 for n in lengths) and lengths.count(FPS // 2) >= 2, lengths


def test_recorder_services_start_stop_discard(tmp_path, driver):
    from std_srvs.srv import Trigger

    nodes = start_recorder(tmp_path, driver, auto_start=False)
    clients = {name: driver.probe.node.create_client(Trigger, f"demo_recorder/{name}")
               for name in ("start", "stop", "discard")}

    def call(name: str) -> str:
        assert clients[name].wait_for_service(timeout_sec=10)
        future = clients[name].call_async(Trigger.Request())
        assert driver.probe.wait_for(future.done, 10)
        return future.result().message

    try:
        driver.set(True)
        time.sleep(0.6)
        assert "started" not in nodes.log("demo_recorder")  # manual: nothing before ~/start
        assert call("start") == "armed"
        assert nodes.wait_log("demo_recorder", "episode 0 started", 10)
        time.sleep(0.5)
        assert call("stop") == "saved episode 0"
        time.sleep(0.3)
        assert "episode 1 started" not in nodes.log("demo_recorder")  # ~/stop disarms
        call("start")
        assert nodes.wait_log("demo_recorder", "episode 1 started", 10)
        time.sleep(0.3)
        assert "discarded" in call("discard")
        call("start")
        assert driver.probe.wait_for(lambda: nodes.log("demo_recorder").count("episode 1 started") == 2, 10)
        time.sleep(0.4)
        assert nodes.stop()["demo_recorder"] == 0  # SIGINT saves the episode in progress
    finally:
        nodes.stop()
    log = nodes.log("demo_recorder")
    assert "dropped an episode" in log and "saved episode 1" in log and "node shutdown" in log, log
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 2
