"""The ``vla`` section of a VLA artifact's ``policy.yaml`` (``inputs: vla``): what its graph takes.

A section of :class:`robot_rl.deploy.artifact.PolicyMeta`, kept apart so the artifact schema stays readable. The
graph's inputs, in order: ``image_<camera>`` uint8 ``[B, 3, H, W]`` per camera of ``cameras``, ``tokens`` int64
``[B, L]``, ``token_mask`` bool ``[B, L]``, ``state`` float32 ``[B, A]``, ``noise`` float32 ``[B, H, A]``; output
``action`` float32 ``[B, H*A]`` (joint targets, as every artifact). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INPUT_KINDS = ("vector", "vla")
"""``vector``: one observation vector ``obs [B, D]``; ``vla``: camera images, an instruction and the joint state."""
TOKENIZER_FILE = "tokenizer.json"
IMAGE_FORMAT = "rgb8 uint8 [B, 3, H, W] (RGB, channels first, 0-255; no normalisation outside the graph)"
"""The one image format of a VLA artifact (``vla.image_format``); ROS ``sensor_msgs/Image`` ``rgb8``, transposed."""
STATE_FORMAT = "joint_pos: measured joint positions in robot units (rad), action order, float32 [B, A]"
"""What a VLA artifact's ``state`` input is (``vla.state``): not ``q - default``, the raw positions."""
NOISE_FORMAT = "zeros: float32 [B, H, A] flow noise at t = 1, zeros for the deterministic policy"
"""The flow noise a runtime feeds (``vla.noise``)."""
RESIZE_RULES = ("none", "nearest")
"""``vla.resize``: ``none`` refuses an image of another size; ``nearest`` resamples it (nearest pixel) to ``H x W``."""


@dataclass(frozen=True)
class VLAInputs:
    """The inputs of a VLA artifact (``policy.yaml`` ``vla``), everything a runtime needs to feed its graph.

    Attributes:
        cameras: camera names, in the order of the graph inputs ``image_<name>``.
        image_topics: ``sensor_msgs/Image`` topic of each camera (relative: a node's namespace applies).
        height, width: image size in pixels, as trained.
        image_format: :data:`IMAGE_FORMAT`.
        resize: :data:`RESIZE_RULES`: ``none`` (an image of another size is refused) or ``nearest``.
        state: :data:`STATE_FORMAT`.
        tokenizer: the tokenizer file in the artifact (``tokenizers`` JSON, checksummed in the manifest).
        max_text_len: ``L``, token ids per instruction (right-padded with 0 = ``[PAD]``, cut at ``L``).
        instructions: the instruction strings the policy was trained on.
        instruction_topic: ``std_msgs/String`` topic of the instruction.
        noise: :data:`NOISE_FORMAT`.
        flow_steps: Euler steps unrolled in the graph.
    """

    cameras: list[str]
    image_topics: list[str]
    height: int
    width: int
    tokenizer: str
    max_text_len: int
    instructions: list[str]
    flow_steps: int
    instruction_topic: str = "instruction"
    resize: str = "none"
    image_format: str = IMAGE_FORMAT
    state: str = STATE_FORMAT
    noise: str = NOISE_FORMAT

    def validate(self, bad: Callable[..., Exception]) -> None:
        """Raise ``bad(key, value, problem)`` at the first field out of its range."""
        def whole(key: str, value: Any, low: int, high: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise bad(f"vla.{key}", value, f"must be a whole number in [{low}, {high}]")

        names = self.cameras
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.isidentifier() for n in names) \
                or len(set(names)) != len(names):
            raise bad("vla.cameras", names, "must be a non-empty list of unique camera names (letters, digits, _)")
        topics = self.image_topics
        if not isinstance(topics, list) or len(topics) != len(names) \
                or not all(isinstance(t, str) and t for t in topics):
            raise bad("vla.image_topics", topics, f"must be one topic name per camera of {names}")
        whole("height", self.height, 8, 1024)
        whole("width", self.width, 8, 1024)
        whole("max_text_len", self.max_text_len, 1, 1024)
        whole("flow_steps", self.flow_steps, 1, 1000)
        for key, value, expected in (("image_format", self.image_format, IMAGE_FORMAT),
                                     ("state", self.state, STATE_FORMAT), ("noise", self.noise, NOISE_FORMAT)):
            if value != expected:
                raise bad(f"vla.{key}", value, f"must be {expected!r} (the only one this robot_rl runs)")
        if self.resize not in RESIZE_RULES:
            raise bad("vla.resize", self.resize, f"must be one of {RESIZE_RULES}")
        tokenizer = self.tokenizer
        if not isinstance(tokenizer, str) or Path(tokenizer).name != tokenizer or Path(tokenizer).suffix != ".json" \
                or tokenizer == "manifest.json":
            raise bad("vla.tokenizer", tokenizer, f"must name a .json file of the artifact ({TOKENIZER_FILE})")
        texts = self.instructions
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise bad("vla.instructions", texts, "must be a non-empty list of the instruction strings trained on")
        if not isinstance(self.instruction_topic, str) or not self.instruction_topic:
            raise bad("vla.instruction_topic", self.instruction_topic, "must be a topic name")
