"""A user's local LeRobot policy directory (SmolVLA) behind :class:`~robot_rl.models.vla.policy.VLAPolicy`'s call.

Opt-in: LeRobot 0.6.1 needs Python >= 3.12 and torch < 2.12, so this runs in the venv of ``bash .ci/setup_lerobot``
(docs/vla.md, "LeRobot policies"); ``lerobot`` is imported only by :meth:`LeRobotPolicy.load`. Nothing is ever
downloaded: the hub is switched off (``HF_HUB_OFFLINE=1``) before LeRobot loads, so a backbone named by a hub id
(SmolVLA's ``vlm_model_name``) must be a local directory or already in the Hugging Face cache.

The directory is what LeRobot's ``save_pretrained`` writes: ``config.json`` (``"type": "smolvla"``, its
``input_features`` / ``output_features``), ``model.safetensors``, ``policy_preprocessor.json`` and
``policy_postprocessor.json`` with the normaliser state files they name. Feature names map as

- ``observation.images.<camera>`` <- ``images[<camera>]``, uint8 ``[B, 3, H, W]`` (sent as float ``[0, 1]``, LeRobot's
  convention; the policy resizes with padding to its own resolution);
- ``observation.state`` ``[S]`` <- ``state [B, S]``, our joint positions (rad, robot.yaml order: what
  ``robot-rl record`` stores as ``observation.state``);
- ``task`` <- ``texts`` (B instruction strings; the pre-processor tokenises them);
- ``action`` ``[A]`` -> the returned chunk ``[B, H, A]`` (H = ``chunk_size``), after the post-processor's
  un-normalisation. What ``action`` means is decided by the dataset the policy was trained on: our recordings store
  ``action`` (joint targets, rad) and ``action.policy`` (the env's action in ``[-1, 1]``). With an ``action_spec``
  (the robot's raw-action <-> joint-target map, :func:`robot_rl.deploy.actions.action_spec`) the policy's actions
  are taken as joint targets and mapped into ``[-1, 1]`` by :func:`robot_rl.deploy.actions.to_raw`; without one
  they are taken as env actions (a policy trained with ``action.policy`` as its ``action``) and clipped.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from robot_rl.deploy.actions import to_raw
from robot_rl.deploy.artifact import ActionSpec
from robot_rl.errors import InputError

IMAGES_PREFIX = "observation.images."
STATE_KEY = "observation.state"
ACTION_KEY = "action"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")
SUPPORTED_TYPES = ("smolvla",)
"""Policy types this adapter runs (tested in tests/lerobot_env): their ``predict_action_chunk`` takes the flow noise."""
SAVE_FIX = ("point at the directory LeRobot's save_pretrained wrote (policy.save_pretrained(dir), "
            "preprocessor.save_pretrained(dir), postprocessor.save_pretrained(dir); a lerobot-train checkpoint's "
            "pretrained_model/)")


def check_policy_dir(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of the LeRobot policy directory ``path``, its files checked (LeRobot not imported).

    Raises:
        InputError: ``path`` is not a directory; ``config.json``, ``model.safetensors``, a processor JSON or a
            state file a processor JSON names is missing; ``config.json`` is not JSON with a ``type``, an image
            input, ``observation.state`` and ``action`` or of a type outside :data:`SUPPORTED_TYPES`.
    """
    root = Path(path)
    if not root.is_dir():
        raise InputError("is not a directory", file=root, fix=SAVE_FIX)
    for name in (CONFIG_FILE, WEIGHTS_FILE, *PROCESSOR_FILES):
        if not (root / name).is_file():
            raise InputError("file missing from the LeRobot policy directory", file=root / name, fix=SAVE_FIX)
    for name in PROCESSOR_FILES:
        for step in _read_json(root / name).get("steps", []):
            state_file = step.get("state_file") if isinstance(step, dict) else None
            if state_file and not (root / state_file).is_file():
                raise InputError(f"file named by {name} is missing", file=root / state_file, fix=SAVE_FIX)
    config = _read_json(root / CONFIG_FILE)
    inputs, outputs = config.get("input_features") or {}, config.get("output_features") or {}
    if config.get("type") not in SUPPORTED_TYPES:
        raise InputError(f"policy type not supported here (supported: {list(SUPPORTED_TYPES)})",
                         file=root / CONFIG_FILE, key="type", value=config.get("type"),
                         fix="use a SmolVLA policy directory (LeRobot's save_pretrained of a SmolVLAPolicy)")
    if not any(k.startswith(IMAGES_PREFIX) for k in inputs) or STATE_KEY not in inputs:
        raise InputError(f"needs a camera input ({IMAGES_PREFIX}<camera>) and {STATE_KEY}",
                         file=root / CONFIG_FILE, key="input_features", value=sorted(inputs),
                         fix="use a vision policy trained on a camera and the joint positions")
    if ACTION_KEY not in outputs:
        raise InputError(f"has no {ACTION_KEY!r} output", file=root / CONFIG_FILE, key="output_features",
                         value=sorted(outputs), fix="use a policy whose output feature is 'action'")
    return config


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot be read as JSON ({exc})", file=path, fix=SAVE_FIX) from None
    if not isinstance(data, dict):
        raise InputError("is not a JSON object", file=path, fix=SAVE_FIX)
    return data


def _hub_offline() -> None:
    """Switch the Hugging Face hub off for this process: a missing file is an error, never a download."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported before us: its flag was read from the environment at import time
        constants.HF_HUB_OFFLINE = True


class LeRobotPolicy:
    """A loaded LeRobot policy answering ``act(images, texts, state) -> [B, H, A]`` in ``[-1, 1]`` (module docstring).

    Build it with :meth:`load`. ``cameras``, ``image_shapes``, ``state_dim``, ``action_dim``, ``chunk_len`` (H) and
    ``execute_len`` (LeRobot's ``n_action_steps``: actions it plays per inference) come from ``config.json``.
    """

    def __init__(self, policy: Any, preprocessor: Any, postprocessor: Any, action_spec: ActionSpec | None,
                 path: Path) -> None:
        config = policy.config
        self.policy, self.preprocessor, self.postprocessor = policy, preprocessor, postprocessor
        self.action_spec, self.path = action_spec, path
        self.image_shapes = {k[len(IMAGES_PREFIX):]: tuple(f.shape) for k, f in config.image_features.items()}
        self.cameras = tuple(self.image_shapes)
        self.state_dim = int(config.robot_state_feature.shape[0])
        self.action_dim = int(config.action_feature.shape[0])
        self.chunk_len = int(config.chunk_size)
        self.execute_len = int(config.n_action_steps)
        self.device = torch.device(config.device)
        if action_spec is not None and len(action_spec.scale) != self.action_dim:
            raise InputError(f"the policy outputs {self.action_dim} actions, the robot has {len(action_spec.scale)} "
                             "joints", file=path / CONFIG_FILE, key="output_features.action.shape",
                             fix="evaluate it on the robot it was trained for")

    @classmethod
    def load(cls, path: str | Path, action_spec: ActionSpec | None = None, device: str = "cpu") -> LeRobotPolicy:
        """Load the policy directory ``path`` on ``device``, offline.

        Args:
            action_spec: the robot's action map when the policy outputs joint targets (our ``action``); None when
                it outputs the env's action (our ``action.policy``).

        Raises:
            InputError: the directory is refused by :func:`check_policy_dir`, lerobot is not installed, a file the
                policy needs (the VLM backbone SmolVLA's ``vlm_model_name`` names) is not on this machine, or the
                weights or processor state files do not load.
        """
        root = Path(path)
        config_json = check_policy_dir(root)
        _hub_offline()
        try:
            from huggingface_hub.errors import LocalEntryNotFoundError
            from lerobot.configs.policies import PreTrainedConfig
            from lerobot.policies.factory import get_policy_class, make_pre_post_processors
            from safetensors import SafetensorError
        except ImportError as exc:
            raise InputError(f"loading a LeRobot policy needs lerobot 0.6.1 ({exc})", file=root,
                             fix="run in the venv of `bash .ci/setup_lerobot` (docs/vla.md)") from None

        config = PreTrainedConfig.from_pretrained(root)
        config.device = device
        try:
            policy = get_policy_class(config.type).from_pretrained(root, config=config)
        except (OSError, LocalEntryNotFoundError) as exc:
            raise InputError(f"a file the policy needs is not on this machine (the hub is off: {exc})",
                             file=root / CONFIG_FILE, key="vlm_model_name", value=config_json.get("vlm_model_name"),
                             fix="point vlm_model_name at a local copy of the backbone (config.json + tokenizer + "
                                 "processor files) or fill the Hugging Face cache on a machine with internet") from None
        except (SafetensorError, RuntimeError) as exc:  # not safetensors, or tensors of other shapes than config.json's
            raise InputError(f"does not load into the policy config.json describes ({exc})",
                             file=root / WEIGHTS_FILE, fix=SAVE_FIX) from None
        try:
            preprocessor, postprocessor = make_pre_post_processors(
                config, pretrained_path=str(root), preprocessor_overrides={"device_processor": {"device": device}})
        except (OSError, SafetensorError, RuntimeError) as exc:  # the tokenizer, or a normaliser state file
            raise InputError(f"the pre/post-processors do not load ({exc})", file=root / PROCESSOR_FILES[0],
                             fix=SAVE_FIX) from None
        policy.eval()
        return cls(policy, preprocessor, postprocessor, action_spec, root)

    @property
    def max_text_len(self) -> int:
        """Token ids per instruction the pre-processor keeps (SmolVLA's ``tokenizer_max_length``)."""
        return int(self.policy.config.tokenizer_max_length)

    def text_tokenizer(self) -> tuple[Any, bool]:
        """``(tokenizer, newline)``: the ``transformers`` tokenizer of the pre-processor's tokenizer step and whether a
        step before it ends each task with ``"\\n"`` (SmolVLA's ``smolvla_new_line_processor``)."""
        from lerobot.processor.newline_task_processor import NewLineTaskProcessorStep
        from lerobot.processor.tokenizer_processor import TokenizerProcessorStep

        step = next(s for s in self.preprocessor.steps if isinstance(s, TokenizerProcessorStep))
        return step.input_tokenizer, any(isinstance(s, NewLineTaskProcessorStep) for s in self.preprocessor.steps)

    def chunk_from_tokens(self, images: dict[str, torch.Tensor], tokens: torch.Tensor, token_mask: torch.Tensor,
                          state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """LeRobot's ``predict_action_chunk`` + post-processor on tensors alone (traceable; robot_rl.export_lerobot).

        ``images`` ``{camera: uint8 [B, 3, H, W]}``, ``tokens`` int64 ``[B, L]`` / ``token_mask`` bool ``[B, L]`` (the
        tokenizer step's ids and mask), ``state [B, S]`` joint positions, ``noise [B, H, A]`` -> ``[B, H, A]`` in the
        dataset's action units. The same steps as the pre-processor's normaliser, SmolVLA's ``prepare_images``
        (resize with padding, ``[-1, 1]``) and ``prepare_state`` (padding), its flow (KV cache of the prefix, Euler
        steps) and the post-processor's un-normaliser; tests/lerobot_env pins it to :meth:`act`'s pipeline.
        """
        from lerobot.processor.normalize_processor import NormalizerProcessorStep, UnnormalizerProcessorStep

        norm = next(s for s in self.preprocessor.steps if isinstance(s, NormalizerProcessorStep))
        unnorm = next(s for s in self.postprocessor.steps if isinstance(s, UnnormalizerProcessorStep))
        batch = {f"{IMAGES_PREFIX}{cam}": images[cam].float() / 255.0 for cam in self.cameras}
        batch[STATE_KEY] = state.float()
        batch = norm._normalize_observation(batch, inverse=False)  # LeRobot has no public tensor-only call
        pictures, picture_masks = self.policy.prepare_images(batch)
        pad = noise.new_zeros(*noise.shape[:2], self.policy.config.max_action_dim - self.action_dim)
        actions = self.policy.model.sample_actions(pictures, picture_masks, tokens, token_mask,
                                                   self.policy.prepare_state(batch), noise=torch.cat([noise, pad], -1))
        return unnorm._normalize_action(actions[:, :, : self.action_dim], inverse=True)

    def check_inputs(self, images: dict[str, torch.Tensor], texts: Sequence[str], state: torch.Tensor) -> None:
        """Refuse inputs the policy cannot read: a missing camera, non-uint8 ``[B, 3, H, W]`` images, a state that is
        not ``[B, S]``, or not B non-empty instruction strings (:class:`InputError`)."""
        if state.dim() != 2 or state.shape[1] != self.state_dim:
            raise InputError(f"state must be [B, {self.state_dim}] (the joint positions)", key="state",
                             value=tuple(state.shape), fix=f"pass the {self.state_dim} joint positions per env")
        batch = state.shape[0]
        for cam in self.cameras:
            image = images.get(cam)
            if image is None:
                raise InputError("camera missing", key=f"images.{cam}",
                                 fix=f"pass every camera of {list(self.cameras)}")
            if image.dtype != torch.uint8 or image.dim() != 4 or image.shape[:2] != (batch, 3):
                raise InputError(f"must be uint8 [{batch}, 3, H, W]", key=f"images.{cam}",
                                 value=(str(image.dtype), tuple(image.shape)), fix="pass RGB frames, channels first")
        if len(texts) != batch or not all(isinstance(t, str) and t.strip() for t in texts):
            raise InputError(f"need {batch} non-empty instruction strings", key="texts", value=list(texts),
                             fix="pass one instruction per env")

    @torch.no_grad()
    def act(self, images: dict[str, torch.Tensor], texts: Sequence[str], state: torch.Tensor,
            noise: torch.Tensor | None = None) -> torch.Tensor:
        """Chunk ``[B, H, A]`` of env actions in ``[-1, 1]`` for images ``{camera: uint8 [B, 3, H_img, W_img]}``,
        B instruction strings and ``state [B, S]`` (joint positions, rad); ``noise [B, H, A]`` is the flow's initial
        noise (default zeros, our deterministic policy; LeRobot itself draws it at random). On ``state``'s device."""
        self.check_inputs(images, texts, state)
        batch = {f"{IMAGES_PREFIX}{cam}": images[cam].float() / 255.0 for cam in self.cameras}
        batch[STATE_KEY] = state.float()
        batch["task"] = list(texts)
        inputs = self.preprocessor(batch)
        padded = torch.zeros(state.shape[0], self.chunk_len, self.policy.config.max_action_dim, device=self.device)
        if noise is not None:
            if tuple(noise.shape) != (state.shape[0], self.chunk_len, self.action_dim):
                raise InputError(f"must be [{state.shape[0]}, {self.chunk_len}, {self.action_dim}]", key="noise",
                                 value=tuple(noise.shape), fix="pass [B, chunk_size, action dim] or None")
            padded[..., : self.action_dim] = noise.to(self.device)
        self.policy.reset()  # LeRobot keeps a per-episode queue; every call here is one fresh query
        chunk = self.postprocessor(self.policy.predict_action_chunk(inputs, noise=padded))  # [B, H, A], dataset units
        if self.action_spec is None:
            return chunk.clamp(-1.0, 1.0).to(state.device)
        raw = to_raw(self.action_spec, chunk.double().cpu().numpy())
        return torch.as_tensor(raw, dtype=torch.float32, device=state.device)
