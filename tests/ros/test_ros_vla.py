"""A VLA artifact behind the policy node over real DDS: camera images (sensor_msgs/Image) and an instruction
(std_msgs/String) in, commands out, holds on missing, stale or bad inputs (an image of another size, a wrong
``step`` or data length, a NaN JointState, an empty or 12000-character instruction) and never crashes; and a
short so101_reach_lang and so101_pick_lang sim2sim.

The policy is an untrained :class:`VLAPolicy` exported in the test (one 32x32 ``front`` camera, chunk 4, open loop
of the whole chunk): what is tested is the loop, not success. Its commands are compared with
:class:`VLARuntime`'s chunk for the same image, instruction and state, computed here.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import torch
from rclpy.time import Time
from ros_nodes.messages import image_array, image_message
from ros_support import Nodes, Probe, fresh_domain_id, run_sim2sim
from sensor_msgs.msg import Image
from std_msgs.msg import Float64MultiArray, String

from robot_rl.deploy.actions import action_spec
from robot_rl.deploy.vla_runtime import VLARuntime
from robot_rl.export_vla import export_vla_policy, make_vla_meta
from robot_rl.models.vla import VLA, InstructionTokenizer, VLAConfig
from robot_rl.models.vla.policy import VLAPolicy
from sim.robots import load_robot
from sim.tasks.so101_pick_lang import INSTRUCTIONS as PICK_INSTRUCTIONS
from sim.tasks.so101_reach_lang import INSTRUCTIONS

pytestmark = pytest.mark.ros

ROBOT = load_robot("so101")
DEFAULT = np.array([j.default for j in ROBOT.joints])
LOWER, UPPER = np.array([j.lower for j in ROBOT.joints]), np.array([j.upper for j in ROBOT.joints])
SIZE, H = 32, 4
TEXTS = list(INSTRUCTIONS.table())


def vla_artifact(tmp_path, task: str = "so101_reach_lang", texts: list[str] = TEXTS,
                 cameras: tuple[str, ...] = ("front",)) -> str:
    torch.manual_seed(0)
    tokenizer = InstructionTokenizer.train(texts)
    config = VLAConfig.cpu(state_dim=6, action_dim=6, vocab_size=tokenizer.vocab_size, chunk_len=H, width=32,
                           heads=2, num_steps=3, image_size=SIZE, cameras=cameras)
    policy = VLAPolicy(VLA(config), tokenizer, texts).eval()
    action = action_spec("joint_position_delta_default", ROBOT.control.action_scale, DEFAULT)
    meta = make_vla_meta(policy, ROBOT.name, ROBOT.joint_names, DEFAULT, action,
                         ROBOT.control.policy_hz, (SIZE, SIZE), task=task)
    return str(export_vla_policy(policy, meta, tmp_path / "policy"))


def picture(size: int = SIZE) -> np.ndarray:
    """uint8 ``[3, size, size]``: a fixed colour gradient."""
    ramp = np.linspace(0, 255, size, dtype=np.float64)
    return np.stack([np.add.outer(ramp, 0 * ramp), np.add.outer(0 * ramp, ramp), np.full((size, size), 90.0)]
                    ).astype(np.uint8)


def test_messages_round_trip_an_rgb8_image_and_refuse_other_encodings():
    image = picture(5)
    msg = image_message(image)
    assert (msg.height, msg.width, msg.step, msg.encoding) == (5, 5, 15, "rgb8")
    np.testing.assert_array_equal(image_array(msg), image)
    padded = Image(height=5, width=5, step=16, encoding="rgb8",
                   data=np.pad(image.transpose(1, 2, 0).reshape(5, 15), ((0, 0), (0, 1))).tobytes())
    np.testing.assert_array_equal(image_array(padded), image)  # row padding (step > 3 W) is skipped
    with pytest.raises(ValueError, match="bgr8"):
        image_array(Image(height=5, width=5, step=15, encoding="bgr8", data=msg.data))
    with pytest.raises(ValueError, match="holds 15 bytes"):
        image_array(Image(height=5, width=5, step=15, encoding="rgb8", data=bytes(15)))


def test_policy_node_runs_a_vla_artifact_from_image_and_instruction_topics_and_holds_on_bad_input(tmp_path):
    policy = vla_artifact(tmp_path)
    expected = np.clip(VLARuntime(policy).infer({"front": picture()}, TEXTS[0], DEFAULT), LOWER, UPPER)  # [H, 6]
    domain = fresh_domain_id()
    probe = Probe(domain, ROBOT.joint_names)
    image_pub = probe.node.create_publisher(Image, "camera/front/image_raw", 1)
    text_pub = probe.node.create_publisher(String, "instruction", 1)
    episode_pub = probe.node.create_publisher(Float64MultiArray, "sim/episode", 10)
    feed = {"image": None, "text": None, "stamp_s": 0.0}  # stamp_s: added to the images' stamps

    def publish() -> None:  # 20 Hz camera and instruction, as long as feed holds them
        if feed["image"] is not None:  # an array [3, H, W], or a (malformed) Image message as it is
            msg = feed["image"] if isinstance(feed["image"], Image) else image_message(feed["image"])
            now_ns = probe.node.get_clock().now().nanoseconds
            msg.header.stamp = Time(nanoseconds=now_ns + int(feed["stamp_s"] * 1e9)).to_msg()
            image_pub.publish(msg)
        if feed["text"] is not None:
            text_pub.publish(String(data=feed["text"]))

    probe.node.create_timer(0.05, publish)
    stats = tmp_path / "stats.json"
    nodes = Nodes("deploy.launch.yaml", {"policy": policy}, domain, tmp_path, extra={"policy_node": {
        "soft_start_s": 0.0, "max_step_change": "[10.0]", "image_timeout": 0.3, "stats_file": str(stats)}})
    log = lambda: nodes.log("policy_node")  # noqa: E731
    try:
        assert probe.wait_for(lambda: "commands on" in log(), 90), log()
        probe.state_fn = lambda t: DEFAULT
        assert probe.wait_for(lambda: "no image yet from camera 'front'" in log(), 30), log()
        feed["image"] = picture()
        assert probe.wait_for(lambda: "no instruction yet" in log(), 30), log()
        assert probe.received() == []  # nothing sent before the policy's first target
        feed["text"] = TEXTS[0]
        assert probe.wait_for(lambda: len(probe.received()) >= 12, 30), log()
        commands = np.array([c for _, c in probe.received()])
        # every command is one row of the chunk computed here (open loop of the whole chunk: all rows, in turn)
        rows = np.abs(commands[:, None, :] - expected[None]).max(axis=2).argmin(axis=1)
        np.testing.assert_allclose(commands, expected[rows], atol=1e-5)
        assert set(rows.tolist()) == set(range(H))

        rgb = picture().transpose(1, 2, 0).tobytes()  # 32 rows of 96 bytes
        short_step = Image(height=SIZE, width=SIZE, step=90, encoding="rgb8", data=rgb)
        short_data = Image(height=SIZE, width=SIZE, step=3 * SIZE, encoding="rgb8", data=rgb[:100])
        for bad, line in ((picture(48), "image is 48x48, the policy takes 32x32"), (None, "s old (image_timeout"),
                          (short_step, "with step 90 holds 3072 bytes"), (short_data, "with step 96 holds 100 bytes")):
            feed["image"] = bad
            assert probe.wait_for(lambda line=line: line in log(), 30), log()
            since = time.monotonic()
            assert probe.wait_for(lambda since=since: len(probe.received(since)) >= 5, 10)
            held = np.array([c for _, c in probe.received(since)])
            np.testing.assert_array_equal(held, held[:1].repeat(len(held), 0))  # the last command, held
            feed["image"] = picture()
            assert probe.wait_for(lambda: len(probe.received(time.monotonic() - 0.2)) >= 3, 10)

        # sim2sim's episode end (the scene reset under the node): images stamped before it are not used, and with
        # no last command to hold nothing is sent until an image of the new scene arrives
        feed["stamp_s"] = -5.0
        time.sleep(0.2)
        waits = log().count("no image yet from camera 'front'")
        episode_pub.publish(Float64MultiArray(data=[0.0, 0.0, 0.1]))
        # the wait for the new scene's first image is logged as info; past image_timeout it is a fault (warning)
        waiting = re.compile(r"INFO[^\n]*waiting for the new episode's first image from camera 'front'")
        assert probe.wait_for(lambda: waiting.search(log()) is not None, 30), log()
        assert probe.wait_for(lambda: log().count("no image yet from camera 'front'") > waits, 30), log()
        time.sleep(0.2)  # commands in flight when the line appeared
        since = time.monotonic()
        time.sleep(0.5)
        assert probe.received(since) == []
        feed["stamp_s"] = 0.0
        assert probe.wait_for(lambda: len(probe.received(time.monotonic() - 0.2)) >= 3, 10), log()

        probe.state_fn = lambda t: np.full(6, np.nan)  # a driver publishing NaN positions: ignored, then stale
        assert probe.wait_for(lambda: "ignoring invalid JointState" in log() and "JointState stale" in log(), 30), log()
        time.sleep(0.2)  # commands still in flight when the log line appeared (DDS can lag the log under load)
        since = time.monotonic()
        time.sleep(0.5)
        held = np.array([c for _, c in probe.received(since)])
        assert len(held) >= 5, len(held)  # the node keeps publishing while stale: one command, held
        np.testing.assert_array_equal(held, held[:1].repeat(len(held), 0))
        probe.state_fn = lambda t: DEFAULT
        assert probe.wait_for(lambda: len(probe.received(time.monotonic() - 0.2)) >= 3, 10), log()

        for text, line in ((" ", "the instruction is empty"), ("reach " * 2000, "12000 characters, more than 4096"),
                           ("reach the purple target", "not one the policy was trained on")):
            feed["text"] = text
            assert probe.wait_for(lambda line=line: "instruction refused" in log() and line in log(), 30), log()
        assert "reach " * 20 not in log()  # quoted at most 80 characters, never 12000 in a log line
        assert nodes.stop()["policy_node"] == 0  # alive until stopped: none of it crashed the node
    finally:
        nodes.stop()
        probe.close()
    summary = json.loads(stats.read_text())
    assert summary["inferences"] >= 3 and summary["vla_hold"] > 0 and summary["invalid_state"] > 0, summary
    # each query's frame age behind its joint state: both stamped by the probe's clock, images every 50 ms (in ms)
    assert -100.0 < summary["image_age_p50_ms"] < 1000.0, summary


@pytest.mark.slow
def test_sim2sim_so101_reach_lang_with_an_untrained_vla_artifact(tmp_path):
    """The simulated robot plays so101_reach_lang: the task's instruction and 32x32 front images out, episodes
    reported; the policy node runs the VLA on them and commands the arm (an untrained policy: no success asked)."""
    policy = vla_artifact(tmp_path)
    domain = fresh_domain_id()
    probe = Probe(domain, ROBOT.joint_names)
    episodes, images, texts = (probe.record(t, topic) for t, topic in (
        (Float64MultiArray, "sim/episode"), (Image, "camera/front/image_raw"), (String, "instruction")))
    stats = tmp_path / "stats.json"
    sim_params = {"task": "so101_reach_lang", "episode_s": 2.0, "cameras": "front", "image_size": SIZE,
                  "command_latency_s": 0.005}
    nodes = Nodes("sim2sim.launch.yaml", {"policy": policy}, domain, tmp_path,
                  extra={"sim_robot": sim_params, "policy_node": {"stats_file": str(stats)}})
    run_sim2sim(probe, nodes, episodes, 3, 180)
    assert [m.data[0] for m in episodes] == list(range(len(episodes)))
    assert all(m.data[1] in (0.0, 1.0) and 0.0 < m.data[2] < 1.0 for m in episodes)
    assert {m.data for m in texts} <= set(TEXTS) and len({m.data for m in texts}) >= 1
    assert len(images) > 20 and all((m.height, m.width, m.encoding) == (SIZE, SIZE, "rgb8") for m in images)
    assert image_array(images[-1]).std() > 5  # a rendered scene, not a blank frame
    summary = json.loads(stats.read_text())
    assert summary["inferences"] > 10, summary
    assert -50.0 < summary["image_age_p50_ms"] < 2000.0, summary  # the robot's render thread stamps the state's time


@pytest.mark.slow
def test_sim2sim_so101_pick_lang_with_an_untrained_vla_artifact(tmp_path):
    """The simulated robot plays so101_pick_lang: its cube scene, the task's instruction naming a cube, front and wrist
    images out (the wrist camera moves with the arm), each episode scored by the task's own success rule and reported
    with the gripper-to-named-cube distance (an untrained policy: no success asked)."""
    texts = list(PICK_INSTRUCTIONS.table())
    policy = vla_artifact(tmp_path, "so101_pick_lang", texts, ("front", "wrist"))
    domain = fresh_domain_id()
    probe = Probe(domain, ROBOT.joint_names)
    episodes, wrist, sent = (probe.record(t, topic) for t, topic in (
        (Float64MultiArray, "sim/episode"), (Image, "camera/wrist/image_raw"), (String, "instruction")))
    sim_params = {"task": "so101_pick_lang", "episode_s": 2.0, "cameras": "front,wrist", "image_size": SIZE,
                  "command_latency_s": 0.005}
    nodes = Nodes("sim2sim.launch.yaml", {"policy": policy}, domain, tmp_path, extra={"sim_robot": sim_params})
    run_sim2sim(probe, nodes, episodes, 3, 180)
    assert [m.data[0] for m in episodes] == list(range(len(episodes)))
    assert all(m.data[1] in (0.0, 1.0) and 0.0 < m.data[2] < 1.0 for m in episodes)
    assert {m.data for m in sent} <= set(texts) and len({m.data for m in sent}) >= 1
    assert len(wrist) > 20 and all((m.height, m.width) == (SIZE, SIZE) for m in wrist)
    assert image_array(wrist[-1]).std() > 5
