"""Run an exported VLA policy without torch: camera images, an instruction and the joint state -> joint targets.

:class:`VLARuntime` is :class:`robot_rl.deploy.runtime.PolicyRuntime`'s twin for ``inputs: vla`` artifacts
(onnxruntime + tokenizers + numpy). Its chunks ``[H, A]`` are played by the same
:func:`robot_rl.deploy.runtime.chunk_executor` of policy.yaml's ``chunk_execution``. Bad input is an
:class:`~robot_rl.errors.InputError` naming what is wrong (the policy node holds its command and logs it):
a missing camera, an image of another size (resampled only where policy.yaml says ``resize: nearest``) or
type, an instruction refused by :func:`robot_rl.deploy.instruction.check_instruction`, a state that is not
``A`` finite numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from robot_rl.deploy.artifact import ArtifactError, PolicyMeta
from robot_rl.deploy.instruction import check_instruction, load_tokenizer
from robot_rl.deploy.validate import RobotSpec, graph_inputs, load_policy
from robot_rl.errors import InputError

log = logging.getLogger(__name__)


def resize_nearest(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[..., height, width]`` of ``image [..., h, w]`` (e.g. uint8 ``[3, h, w]`` or ``[T, 3, h, w]``), each pixel the
    nearest source pixel (centre aligned). The one resampling rule of training (``agent.image_size``) and the node."""
    h, w = image.shape[-2:]
    rows = np.minimum(((np.arange(height) + 0.5) * h / height).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * w / width).astype(np.int64), w - 1)
    return image[..., rows[:, None], cols[None, :]]


class VLARuntime:
    """A VLA artifact ready to run: ``infer(images, instruction, state) -> targets [H, A]``.

    Validated at load by :func:`robot_rl.deploy.validate.load_policy` (manifest, policy.yaml, tokenizer, ONNX
    I/O and, given a robot, joints, limits and default pose). One robot (batch 1); noise zeros (policy.yaml's
    ``vla.noise``) unless :meth:`infer` is given one.

    Args:
        artifact_dir: directory written by ``robot_rl.export_vla.export_vla_policy``.
        robot: the robot's joints, limits and default pose.
        threads: onnxruntime intra-op threads.
    """

    def __init__(self, artifact_dir: str | Path, robot: RobotSpec | None = None, threads: int = 1) -> None:
        artifact_dir = Path(artifact_dir)
        self.meta: PolicyMeta
        self.meta, self.session = load_policy(artifact_dir, robot, threads)
        if self.meta.vla is None:
            raise ArtifactError("is a vector policy (inputs: vector), not a VLA one", file=artifact_dir / "policy.yaml",
                                key="inputs", value=self.meta.inputs, fix="run it with PolicyRuntime")
        self.vla = self.meta.vla
        self.tokenizer = load_tokenizer(artifact_dir / self.vla.tokenizer)
        self.feeds = {name: np.zeros((1, *shape), dtype=dtype) for name, dtype, shape in graph_inputs(self.meta)}
        self._zero_noise = np.zeros_like(self.feeds["noise"])
        self.instruction: str | None = None

    def set_instruction(self, text: str, allow_untrained: bool = True) -> list[str]:
        """Encode ``text`` for the next inferences; returns the warnings (not trained on, cut at ``L``).

        Raises:
            InputError: empty, characters the tokenizer maps to ``[UNK]``, or (``allow_untrained=False``) none of
                policy.yaml's ``vla.instructions``; the previous instruction stays.
        """
        ids, mask, warnings = check_instruction(self.tokenizer, text, self.vla.max_text_len, self.vla.instructions,
                                                allow_untrained)
        self.feeds["tokens"][0], self.feeds["token_mask"][0] = ids, mask
        self.instruction = text
        return warnings

    def set_image(self, camera: str, image: np.ndarray) -> None:
        """Copy ``image`` uint8 ``[3, h, w]`` (RGB, channels first) of ``camera`` into the graph input.

        Raises:
            InputError: an unknown camera, not uint8 ``[3, h, w]``, or ``h x w`` other than policy.yaml's
                ``height x width`` while ``vla.resize`` is ``none``.
        """
        v = self.vla
        if camera not in v.cameras:
            raise InputError(f"the policy has no camera {camera!r}", key="images", value=camera,
                             fix=f"send the cameras of policy.yaml: {v.cameras}")
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] != 3:
            raise InputError(f"camera {camera!r}: the image must be uint8 [3, H, W] (RGB, channels first)",
                             key=f"images.{camera}", value=f"{image.dtype} {list(image.shape)}",
                             fix="send rgb8 images (sensor_msgs/Image encoding rgb8)")
        if image.shape[1:] != (v.height, v.width):
            if v.resize != "nearest":
                raise InputError(f"camera {camera!r}: image is {image.shape[1]}x{image.shape[2]}, the policy "
                                 f"takes {v.height}x{v.width} (policy.yaml vla.resize: none)",
                                 key=f"images.{camera}", value=list(image.shape),
                                 fix=f"publish {v.height}x{v.width} images, or export with resize='nearest'")
            image = resize_nearest(image, v.height, v.width)
        self.feeds[f"image_{camera}"][0] = image

    def infer(self, images: Mapping[str, np.ndarray], instruction: str, state: np.ndarray,
              noise: np.ndarray | None = None) -> np.ndarray:
        """Joint targets ``[H, A]`` float64 of one observation (a new array; not thread-safe).

        Args:
            images: ``{camera: uint8 [3, h, w]}``, every camera of policy.yaml (extra ones are ignored).
            instruction: the instruction text (encoded again only when it changes; its warnings are logged).
            state: ``[A]`` measured joint positions in robot units, action order.
            noise: ``[H, A]`` flow noise; None: zeros.

        Raises:
            InputError: a missing camera or bad image, a refused instruction, a state that is not ``A`` finite
                numbers, a noise that is not ``[H, A]`` finite numbers.
        """
        missing = [c for c in self.vla.cameras if c not in images]
        if missing:
            raise InputError(f"no image from camera(s) {missing}", key="images", value=sorted(images),
                             fix=f"send every camera of policy.yaml: {self.vla.cameras}")
        for camera in self.vla.cameras:
            self.set_image(camera, images[camera])
        if instruction != self.instruction:
            for warning in self.set_instruction(instruction):
                log.warning(warning)
        self.feeds["state"][0] = self._finite("state", state, self.feeds["state"].shape[1:])
        self.feeds["noise"][0] = self._zero_noise[0] if noise is None else self._finite(
            "noise", noise, self._zero_noise.shape[1:])
        out = self.session.run(["action"], self.feeds)[0]
        return out.reshape(self.meta.chunk_length, self.meta.action_dim).astype(np.float64)

    @staticmethod
    def _finite(key: str, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``values`` as float64 of ``shape`` with every entry finite, else InputError naming ``key``."""
        array = np.asarray(values, dtype=np.float64)
        if array.shape != shape or not np.isfinite(array).all():
            raise InputError(f"{key} must be {list(shape)} finite numbers", key=key, value=array.tolist(),
                             fix="check the joint states" if key == "state" else "pass finite noise")
        return array
