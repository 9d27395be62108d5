"""Supervised fine-tuning of a VLA from demonstrations (``agent=vla``): offline, under ``robot-rl train``.

The agent trains the flow-matching model of :mod:`robot_rl.models.vla` on a LeRobot dataset recorded with camera
video and one instruction (task string) per episode. It is :attr:`~robot_rl.agents.base.Agent.offline`: the
runner steps no env and calls :meth:`VLAAgent.update`, one AdamW step on a batch of ``batch_size`` frames
(:class:`~robot_rl.data.vla_batches.VLABatches`: images ``{camera: uint8 [B, 3, H, W]}``, tokens ``[B, L]``,
state ``[B, S]``, action chunks ``[B, H, A]``), ``updates`` times; the env serves the final evaluation, where
:meth:`VLAAgent.policy` (a :class:`~robot_rl.models.vla.policy.VLAPolicy`) plays its chunks with
:meth:`VLAAgent.policy_chunking` (``robot_rl/train/vla_eval.py``).

The instruction tokenizer is a BPE trained at start on the dataset's task strings plus every instruction the task
draws (``EnvSpec.instructions``); the checkpoint holds it as its JSON text, and a resumed or evaluated run uses that
text, so the token ids never change under a trained model. The dataset's frames are decoded at the first update
only: opening a run to evaluate it reads the dataset's metadata, not its video.

Learning rate: linear warm-up over ``warmup_updates``, then ``lr_schedule`` (``cosine`` to 0 at ``updates``, or
``constant``). Gradients are clipped to norm ``grad_clip`` (0: not clipped).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robot_rl.agents.base import Agent, EnvSpec, Obs, register_agent
from robot_rl.config.checks import check, fail
from robot_rl.config.schema import AgentConfig
from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.deploy.chunking import CHUNK_MODES
from robot_rl.errors import InputError

MODEL_SIZES = ("cpu", "gpu")
LR_SCHEDULES = ("cosine", "constant")
IMAGES_PREFIX = "observation.images."
FILM_KEYPOINTS = 4
"""Keypoint tokens per camera of ``image_encoder=efficientnet_lite0_film`` when ``image_keypoints`` is 0."""


@dataclass
class VLAAgentConfig(AgentConfig):
    """``agent=vla`` (configs/agent/vla.yaml).

    Attributes:
        dataset: LeRobot dataset directory with ``observation.images.<camera>`` and task strings (required).
        size: ``cpu`` (:meth:`VLAConfig.cpu <robot_rl.models.vla.model.VLAConfig.cpu>`, ~0.2M parameters) or
            ``gpu`` (~12M).
        width: the token width of the prefix transformer and the action expert (0: the size preset's, 64 on
            ``cpu``, 256 on ``gpu``; a multiple of 8, the presets' most attention heads).
        image_encoder: ``conv`` (trained from scratch), ``efficientnet_lite0`` (frozen ImageNet backbone) or
            ``efficientnet_lite0_film`` (that backbone's early stage read by an instruction-modulated keypoint head,
            ``image_keypoints`` tokens per camera, 4 when 0; the frozen features of the dataset's frames are computed
            once at the first update; no ``image_shift``). docs/vla.md says which to pick.
        cameras: the dataset's cameras the policy sees, in this order.
        image_size: 0 (default): the policy sees the dataset's frames as they are (square, every camera the same
            size). N: every frame of every camera is resampled to N x N at load, by the deploy runtime's nearest-pixel
            rule (:func:`~robot_rl.deploy.vla_runtime.resize_nearest`), so a dataset from a 480x640 camera trains a
            64x64 policy (``agent.image_size=64``) and only N x N frames are kept in memory; the export then says
            ``vla.resize: nearest`` and the node resamples the camera's images the same way. Evaluation in sim
            renders at N (``task.env.image_size=N``).
        chunk_len: H, actions per chunk.
        execute_len: actions of each chunk played open loop before the next query (evaluation and export).
        execution: ``open_loop`` (a query every ``execute_len`` steps) or ``temporal_ensemble`` (a query every step,
            each step's action the weighted mean of every chunk predicting it: ACT's temporal ensembling;
            :mod:`robot_rl.deploy.chunking`), in evaluation and in the exported artifact.
        ensemble_decay: temporal ensembling's ``m >= 0`` in ACT's weights ``w_i = exp(-m i)``, ``i = 0`` the oldest
            prediction of the step.
        max_text_len: L, instruction tokens kept.
        vocab_size: most tokens of the instruction BPE.
        updates: gradient steps of the run (the runner's progress counter).
        batch_size: frames per step.
        lr, weight_decay: AdamW's.
        lr_schedule: ``cosine`` (to 0 at ``updates``) or ``constant``, after ``warmup_updates`` of linear warm-up.
        grad_clip: gradient-norm clip (0: none).
        log_interval: gradient steps per log row (``checkpoint_interval`` counts rows).
        flow_steps: Euler steps of the sampler.
        expert_updates: gradient steps after ``updates`` (``efficientnet_lite0_film``) with the keypoint head frozen
            and its keypoints computed once per frame (:meth:`VLABatches.cache_keypoints
            <robot_rl.data.vla_batches.VLABatches.cache_keypoints>`): the rest of the model (mostly the action
            expert) trains on what the head sees, at a fraction of a joint step's cost, its learning-rate schedule
            restarted over these steps (0: none). A flow-matching expert can need far more steps than the head
            (docs/vla.md, "The flow expert needs more steps than the keypoints").
        state_key: the dataset's state feature (joint positions: evaluation feeds ``env.joint_positions()``).
        action_key: the dataset's action feature: ``action.policy`` (the env's action in [-1, 1], as ``robot-rl
            record`` in sim writes it) or ``action`` (joint targets in rad, in the robot's joint order: a dataset
            recorded over ROS 2 or by another tool), mapped to the env's action through the robot's action map
            when loaded (``EnvSpec.action_for_targets``; a target beyond the action box maps to its edge).
        relative_actions: predict chunks relative to the least-squares linear map of the state to the action
            (:meth:`VLA.set_anchor <robot_rl.models.vla.model.VLA.set_anchor>`; for position control the action
            holding the current pose), so the model learns the motion rather than the pose it starts from.
        image_grid: image tokens per camera = ``image_grid ** 2`` (0: the size preset's, 4 on ``cpu``).
        image_keypoints: spatial-softmax keypoint tokens per camera: besides the grid (``conv``; 0: none), or the
            only image tokens (``efficientnet_lite0_film``; 0: 4).
        motion_boost: draw frames with weights ``1 + motion_boost * m / mean(m)``, ``m`` how far a frame's chunk moves
            from the pose held (:meth:`VLABatches.motion_weights <robot_rl.data.vla_batches.VLABatches.motion_weights>`;
            0: uniformly). Scripted reaches move in their first few steps and hold still after.
        image_shift: shift every training image by up to this many pixels each way
            (:func:`random_shift <robot_rl.data.vla_batches.random_shift>`, DrQ's augmentation; 0: none).
        image_lag: train each state with the camera images of 0..``image_lag`` frames before (uniform, within its
            episode), as the ROS 2 policy node plans from its cameras' latest frames (docs/deploy.md section 0; 0: the
            state's own frame).
        state_noise: standard deviation (state units, radians for joint positions) of Gaussian noise added to the
            state the model *reads* while training (``obs["state_seen"]``); the relative-action anchor keeps the true
            state. Randomised start poses make the state a fingerprint of each demonstration, which a model uses to
            recall the demonstration's first chunk instead of reading the images; noise wider than that spread
            removes the shortcut (0: none).
        state_shift: standard deviation (state units) of Gaussian noise added to the training state itself, what
            the model reads and what its relative-action anchor uses, while the chunk's absolute action targets stay
            the demonstration's: each frame also teaches the way back from a pose off the demonstrated path (a
            synthetic DART; with ``relative_actions``, the target relative to the shifted anchor moves by the shift)
            (0: none).
        target_keypoint: weight of an auxiliary loss (``efficientnet_lite0_film`` only) pulling the first keypoint
            of each world-fixed camera onto the image position of the dataset's ``target_key`` (the env projects it,
            ``VecEnv.image_position``; :func:`keypoint_loss <robot_rl.models.vla.model.keypoint_loss>`), so the
            instruction-modulated keypoint learns to find the object the instruction names; logged as
            ``loss/keypoint_target`` (0: none). Training only: the policy reads images, never the target.
        target_key: the per-frame world position that loss projects: ``sim.target`` (the named sphere of a
            ``so101_reach_lang`` recording) or ``sim.named_position`` (the named object of any language task's
            recording, e.g. ``so101_pick_lang``'s named cube, which moves once grasped).
        gripper_keypoint: the same for the gripper (``efficientnet_lite0_film``, ``image_keypoints`` >= the number
            of supervised keypoints): the next keypoint is pulled onto the image position of site ``gripper_site``,
            computed from each frame's recorded joint positions (``VecEnv.site_positions``); with both, the policy
            sees the named target and the gripper in image space; ``loss/keypoint_gripper`` (0: none).
        gripper_site: the robot site that keypoint follows (``end_effector``).
        film_stride, film_kernel: ``efficientnet_lite0_film``'s frozen feature stride (4, or 2: keypoints about
            2.5x more precise on reach_lang at 64x64, for about four times the head's work; docs/vla.md) and its
            head's first convolution (1: per pixel; 3: a 3x3 neighbourhood).
        global_condition: also feed the action expert an MLP of the state, the keypoint coordinates and the
            instruction, added to every chunk token (:attr:`VLAConfig.global_condition
            <robot_rl.models.vla.model.VLAConfig.global_condition>`), not only through cross-attention.
        condition_text: whether that condition reads the instruction (its mean token); false: the state and the
            keypoints only (an instructed keypoint already names the object; :attr:`VLAConfig.condition_text
            <robot_rl.models.vla.model.VLAConfig.condition_text>`).
        action_expert: ``transformer`` (chunk self-attention and cross-attention to the prefix) or ``mlp`` (residual
            MLP blocks over the flattened chunk, FiLM-modulated by the time and the global condition; needs
            ``global_condition``; :attr:`VLAConfig.action_expert <robot_rl.models.vla.model.VLAConfig.action_expert>`).
    """

    dataset: str | None = None
    size: str = "cpu"
    width: int = 0
    image_encoder: str = "conv"
    cameras: list[str] = field(default_factory=lambda: ["front", "wrist"])
    image_size: int = 0
    chunk_len: int = 16
    execute_len: int = 8
    execution: str = "open_loop"
    ensemble_decay: float = 0.01
    max_text_len: int = 16
    vocab_size: int = 256
    updates: int = 4000
    batch_size: int = 64
    lr: float = 3e-4
    weight_decay: float = 1e-4
    lr_schedule: str = "cosine"
    warmup_updates: int = 100
    grad_clip: float = 1.0
    log_interval: int = 50
    flow_steps: int = 10
    expert_updates: int = 0
    state_key: str = "observation.state"
    action_key: str = "action.policy"
    relative_actions: bool = True
    image_grid: int = 0
    image_keypoints: int = 0
    motion_boost: float = 0.0
    image_shift: int = 0
    image_lag: int = 0
    state_noise: float = 0.0
    state_shift: float = 0.0
    target_keypoint: float = 0.0
    target_key: str = "sim.target"
    gripper_keypoint: float = 0.0
    gripper_site: str = "end_effector"
    global_condition: bool = False
    condition_text: bool = True
    film_stride: int = 4
    film_kernel: int = 1
    action_expert: str = "transformer"

    def __post_init__(self) -> None:
        check(self, "agent", positive=("lr",),
              non_negative=("weight_decay", "grad_clip", "motion_boost", "state_noise", "state_shift",
                            "target_keypoint", "gripper_keypoint", "ensemble_decay"),
              at_least_1=("chunk_len", "execute_len", "max_text_len", "updates", "batch_size", "log_interval",
                          "flow_steps"),
              at_least_0=("warmup_updates", "image_grid", "image_keypoints", "image_shift", "image_lag", "width",
                          "expert_updates", "image_size"),
              choices={"size": MODEL_SIZES, "lr_schedule": LR_SCHEDULES, "film_stride": (2, 4),
                       "film_kernel": (1, 3, 5), "action_expert": ("transformer", "mlp"), "execution": CHUNK_MODES,
                       "image_encoder": ("conv", "efficientnet_lite0", "efficientnet_lite0_film")})
        if self.width % 8:
            raise fail(self, "agent", "width", "must be a multiple of 8 (the presets' attention heads divide it)",
                       "0 (the size preset's) or e.g. 128")
        if self.execute_len > self.chunk_len:
            raise fail(self, "agent", "execute_len", f"exceeds chunk_len={self.chunk_len}", f"1..{self.chunk_len}")
        if self.image_keypoints and self.image_encoder == "efficientnet_lite0":
            raise fail(self, "agent", "image_keypoints", "needs a keypoint image encoder",
                       "0, or image_encoder=conv / efficientnet_lite0_film")
        if self.expert_updates and self.image_encoder != "efficientnet_lite0_film":
            raise fail(self, "agent", "expert_updates", "freezes the keypoint head of image_encoder="
                       "efficientnet_lite0_film", "0, or image_encoder=efficientnet_lite0_film")
        if self.image_shift and self.image_encoder == "efficientnet_lite0_film":
            raise fail(self, "agent", "image_shift", "does not apply to the cached frozen features of "
                       "efficientnet_lite0_film", "0, or image_encoder=conv")
        for key in ("target_keypoint", "gripper_keypoint"):
            if getattr(self, key) and self.image_encoder != "efficientnet_lite0_film":
                raise fail(self, "agent", key, "needs the keypoints of image_encoder=efficientnet_lite0_film",
                           "0, or image_encoder=efficientnet_lite0_film")
        pulled = len(self.supervised_keypoints())
        if self.image_keypoints and self.image_keypoints < pulled:
            raise fail(self, "agent", "image_keypoints", f"fewer than the {pulled} supervised keypoints "
                       "(target_keypoint, gripper_keypoint)", f"{pulled} or more")
        if self.action_expert == "mlp" and not self.global_condition:
            raise fail(self, "agent", "action_expert", "mlp reads the global condition",
                       "agent.global_condition=true, or action_expert=transformer")
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise fail(self, "agent", "cameras", "must name one or more distinct cameras", "e.g. [front, wrist]")


    def supervised_keypoints(self) -> dict[str, float]:
        """``{point: weight}`` of the keypoints an auxiliary loss pulls, in keypoint order: ``target`` (the named
        object, ``target_keypoint``), then ``gripper`` (``gripper_keypoint``), each where its weight is > 0."""
        return {k: w for k, w in (("target", self.target_keypoint), ("gripper", self.gripper_keypoint)) if w > 0}


def learning_rate(cfg: VLAAgentConfig, update: int) -> float:
    """The learning rate of gradient step ``update`` (0-based): linear warm-up, then the schedule over ``updates``;
    the ``expert_updates`` after them start the schedule again (no warm-up) over their own length."""
    if update >= cfg.updates:
        start, length = cfg.updates, cfg.expert_updates
    elif update < cfg.warmup_updates:
        return cfg.lr * (update + 1) / cfg.warmup_updates
    else:
        start, length = cfg.warmup_updates, cfg.updates - cfg.warmup_updates
    if cfg.lr_schedule == "constant":
        return cfg.lr
    progress = (update - start) / max(1, length)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@register_agent("vla", VLAAgentConfig)
class VLAAgent(Agent):
    """Offline SFT of a VLA (module docstring)."""

    cfg: VLAAgentConfig
    policy_inputs = "vla"
    offline = True
    dataset_key = "dataset"

    def __init__(self, cfg: VLAAgentConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        from robot_rl.data.lerobot import meta
        from robot_rl.models.vla import VLA, InstructionTokenizer, VLAConfig

        if not cfg.dataset:
            raise InputError("agent=vla needs a dataset", key="agent.dataset",
                             fix="agent.dataset=<dir> recorded with cameras, e.g. robot-rl record --task "
                                 "so101_reach_lang --override 'cameras=[\"front\",\"wrist\"]' --out <dir>")
        root = Path(cfg.dataset)  # its description only: the frames are read at the first update
        info, tasks = meta.load_description(root)
        features = info.features
        for cam in cfg.cameras:
            if IMAGES_PREFIX + cam not in features:
                have = [k[len(IMAGES_PREFIX):] for k in features if k.startswith(IMAGES_PREFIX)]
                raise InputError("the dataset has no camera the policy needs", file=root, key="agent.cameras",
                                 value=cam, fix=f"agent.cameras=[...] among the dataset's cameras {have}")
        if cfg.state_key not in features:
            raise InputError("the dataset lacks the state feature agent=vla trains on", file=root,
                             key="agent.state_key", value=cfg.state_key,
                             fix=f"agent.state_key=<joint positions among {sorted(features)}>")
        if cfg.action_key not in features:
            have = [k for k in ("action.policy", "action") if k in features]
            raise InputError("the dataset lacks the action feature agent=vla trains on", file=root,
                             key="agent.action_key", value=cfg.action_key,
                             fix=f"agent.action_key={have[0]}" if have else "record it with `robot-rl record`")
        if cfg.action_key != "action.policy" and env.action_for_targets is None:
            raise InputError("joint-target actions need the env's action map; this env has none", file=root,
                             key="agent.action_key", value=cfg.action_key,
                             fix="train on a position-controlled task, or record action.policy")
        if cfg.supervised_keypoints():
            target = features.get(cfg.target_key)
            if cfg.target_keypoint and (target is None or tuple(target.shape) != (3,)):
                raise InputError("agent.target_keypoint needs a per-frame world position [3] in the dataset",
                                 file=root, key="agent.target_key", value=cfg.target_key,
                                 fix=f"agent.target_key=<a [3] feature among {sorted(features)}>, or "
                                     "agent.target_keypoint=0")
            if not set(cfg.cameras) & set(env.world_cameras):
                raise InputError("agent.target_keypoint / gripper_keypoint need a world-fixed camera to project "
                                 "into", key="agent.cameras", value=list(cfg.cameras),
                                 fix=f"add one of the task's world cameras {list(env.world_cameras)}, or set both "
                                     "to 0")
            if cfg.gripper_keypoint and env.site_positions is None:
                raise InputError("agent.gripper_keypoint needs the env's forward kinematics (VecEnv.site_positions)",
                                 key="agent.gripper_keypoint", value=cfg.gripper_keypoint,
                                 fix="agent.gripper_keypoint=0")
        self.scene = env
        """The env's spec: its world cameras, image projection and forward kinematics (auxiliary keypoint targets)."""
        action_dim = features[cfg.action_key].shape[0]
        if action_dim != env.action_dim:
            raise InputError(f"the dataset's actions have {action_dim} dims, the env's {env.action_dim}",
                             file=root, key="agent.dataset", fix="train on the task the dataset was recorded in")
        image_size = self.training_image_size(root, features, env)
        self.instructions = tuple(dict.fromkeys([*tasks, *env.instructions]))
        """Every instruction the policy accepts: the dataset's task strings, then the task's table."""
        self.tokenizer = InstructionTokenizer.train(self.instructions, cfg.vocab_size)
        sizes = {"chunk_len": cfg.chunk_len, "max_text_len": cfg.max_text_len, "cameras": tuple(cfg.cameras),
                 "image_encoder": cfg.image_encoder, "image_size": image_size, "num_steps": cfg.flow_steps,
                 "frame_resize": "nearest" if cfg.image_size else "none",
                 "global_condition": cfg.global_condition, "condition_text": cfg.condition_text,
                 "film_stride": cfg.film_stride, "film_kernel": cfg.film_kernel, "action_expert": cfg.action_expert}
        if cfg.image_grid:
            sizes["image_grid"] = cfg.image_grid
        if cfg.width:
            sizes["width"] = cfg.width
        if cfg.image_keypoints or cfg.image_encoder == "efficientnet_lite0_film":
            sizes["image_keypoints"] = cfg.image_keypoints or max(FILM_KEYPOINTS, len(cfg.supervised_keypoints()))
        preset = VLAConfig.cpu if cfg.size == "cpu" else VLAConfig.gpu
        self.model_config = preset(features[cfg.state_key].shape[0], action_dim, self.tokenizer.vocab_size,
                                   **sizes)
        self.model = VLA(self.model_config).to(self.device)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=cfg.lr,
                                           weight_decay=cfg.weight_decay)
        self.generator = torch.Generator().manual_seed(0)
        """Draws the frames of each batch (saved: a resumed run draws the batches it would have)."""
        self.num_updates = 0
        self.batches = None
        """The decoded dataset (:class:`VLABatches`), loaded at the first :meth:`update`."""
        self.frame_weights: torch.Tensor | None = None
        """``[N]`` frame sampling weights (``motion_boost > 0``), from the model's anchor at the first update."""

    # --- offline training ---------------------------------------------------------------------------

    def offline_updates(self) -> int:
        """``agent.updates`` gradient steps, then ``agent.expert_updates``."""
        return self.cfg.updates + self.cfg.expert_updates

    def training_image_size(self, root: Any, features: dict, env: EnvSpec) -> int:
        """The square size the policy sees: ``agent.image_size``, or the dataset's frames (square, one size), checked
        against the size the task env renders its cameras at (in-sim evaluation)."""
        cfg = self.cfg
        shapes = {cam: tuple(features[IMAGES_PREFIX + cam].shape[:2]) for cam in cfg.cameras}
        size = cfg.image_size
        if not size:
            (height, width), *_ = shapes.values()
            if height != width or len(set(shapes.values())) > 1:
                raise InputError("VLA images must be square and every camera the same size", file=root,
                                 key="agent.cameras", value={cam: list(hw) for cam, hw in shapes.items()},
                                 fix=f"agent.image_size={min(64, height, width)} (every frame resampled to that square "
                                     "at load), or record with a square task.env.image_size")
            size = height
        if env.image_size and env.image_size != size:
            raise InputError(f"the policy sees {size}x{size} images, the task env renders {env.image_size}x"
                             f"{env.image_size}", key="task.env.image_size", value=env.image_size,
                             fix=f"task.env.image_size={size}")
        return int(size)

    def _action_map(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Joint targets ``[N, A]`` (rad) -> the env's action ``[N, A]`` for ``action_key`` other than
        ``action.policy``; None: the dataset's actions are the env's already."""
        return None if self.cfg.action_key == "action.policy" else self.scene.action_for_targets

    def load_batches(self) -> Any:
        """The dataset as :class:`~robot_rl.data.vla_batches.VLABatches`, as training reads it (frozen features
        cached where the image encoder has them, frame weights set); before the first update, also sets the model's
        normalisation and anchor from it."""
        from robot_rl.data.vla_batches import VLABatches

        cfg, cameras = self.cfg, tuple(self.cfg.cameras)
        points = cfg.supervised_keypoints()
        batches = VLABatches(cfg.dataset, self.tokenizer, cfg.chunk_len, cfg.max_text_len, cameras,
                             image_size=cfg.image_size or None, state_key=cfg.state_key,
                             action_key=cfg.action_key, action_map=self._action_map(),
                             target_key=cfg.target_key if cfg.target_keypoint else None,
                             target_map=self.keypoint_targets if points else None)
        if self.num_updates == 0:  # a resumed model has the stats in its buffers already
            if self.cfg.relative_actions:
                *stats, weight, bias = (x.to(self.device) for x in batches.anchored_normalization())
                self.model.set_anchor(weight, bias)
            else:
                stats = [x.to(self.device) for x in batches.normalization()]
            self.model.set_stats(*stats)
        if self.model.instructed_images:
            batches.cache_features(lambda images: self.model.image_features(images.to(self.device)).cpu())
        if self.cfg.motion_boost > 0:
            self.frame_weights = batches.motion_weights(self.model.anchor_weight.cpu(), self.model.anchor_bias.cpu(),
                                                        self.cfg.motion_boost)
        return batches

    def demonstration_batches(self, frozen_head: bool = True) -> tuple[Any, torch.Tensor | None]:
        """The run's dataset as a post-training agent keeps it in its loop (``agent=vla_ppo agent.demo_coef``):
        :meth:`load_batches` of the trained model, with every frame's keypoints cached where the image encoder has an
        instructed keypoint head and the agent keeps it ``frozen_head`` (else the frozen backbone's features, so the
        head is trained through them), and the frame weights training sampled with (None: uniform).

        Raises:
            InputError: the dataset is no longer where the run was trained from.
        """
        if not (Path(self.cfg.dataset) / "data").is_dir():  # moved: the run opened on the description it kept
            raise InputError("the SFT run's demonstrations are not there", file=self.cfg.dataset, key="agent.dataset",
                             fix="put the dataset back where the SFT run was trained from, or set the post-training "
                                 "agent's demo_coef=0")
        self.model.eval()
        batches = self.load_batches()
        if self.model.instructed_images and self.cfg.image_keypoints and frozen_head:
            self.cache_keypoints(batches)
        return batches, self.frame_weights

    def cache_keypoints(self, batches: Any) -> None:
        """Every frame's keypoints, as the model in eval mode locates them, cached in ``batches``
        (:meth:`VLABatches.cache_keypoints <robot_rl.data.vla_batches.VLABatches.cache_keypoints>`)."""
        from robot_rl.data.vla_batches import batch_to

        batches.cache_keypoints(lambda b: self.model.eval().keypoints(batch_to(b, self.device)))

    def keypoint_targets(self, target: torch.Tensor | None, state: torch.Tensor) -> torch.Tensor:
        """``[N, C, P, 2]`` image positions, per camera, of the :meth:`VLAAgentConfig.supervised_keypoints` of ``N``
        frames with world ``target [N, 3]`` and joint positions ``state [N, S]``; NaN for a camera that moves (no
        loss on its keypoints)."""
        world = {"target": target}
        if self.cfg.gripper_keypoint:
            world["gripper"] = self.scene.site_positions(state, self.cfg.gripper_site)
        return self.scene.image_positions({p: world[p] for p in self.cfg.supervised_keypoints()}, self.cfg.cameras)

    def update(self) -> dict[str, float | torch.Tensor]:
        """One AdamW step on the flow-matching loss of a batch plus the weighted keypoint losses: ``loss/flow``,
        ``loss/keypoint_<point>`` (each supervised keypoint), ``lr``, ``grad_norm``."""
        from robot_rl.data.vla_batches import batch_to
        from robot_rl.models.vla import flow

        if self.batches is None:
            self.batches = self.load_batches()
        cfg = self.cfg
        expert_phase = self.num_updates >= cfg.updates
        if expert_phase and self.batches.keypoints is None:  # the head frozen, its keypoints cached (also on resume)
            for p in self.model.keypoint_parameters():
                p.requires_grad_(False)
            self.cache_keypoints(self.batches)
            self.model.train()
        batch = self.batches.sample(cfg.batch_size, self.generator, self.frame_weights, cfg.image_shift,
                                    cfg.image_lag)
        batch = batch_to(batch, self.device)
        if cfg.state_shift > 0:  # before state_noise, so the model reads the shifted state plus its noise
            shift = torch.randn(batch["state"].shape, generator=self.generator).to(self.device)
            batch["state"] = batch["state"] + cfg.state_shift * shift
        if cfg.state_noise > 0:
            jitter = torch.randn(batch["state"].shape, generator=self.generator).to(self.device)
            batch["state_seen"] = batch["state"] + cfg.state_noise * jitter
        noise = torch.randn(batch["action"].shape, device=self.device)
        t = flow.sample_time(cfg.batch_size).to(self.device)
        lr = learning_rate(cfg, self.num_updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        keypoint_target = None if expert_phase else batch.get("target")  # the frozen head learns nothing more
        losses = self.model.losses(batch, batch["action"], noise, t, batch["action_is_pad"], keypoint_target)
        points = {} if expert_phase else cfg.supervised_keypoints()
        keypoint = losses.pop("keypoint", None)  # [P]
        loss = losses["flow"]
        for i, (name, weight) in enumerate(points.items()):
            losses[f"keypoint_{name}"] = keypoint[i]
            loss = loss + weight * keypoint[i]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = (nn.utils.clip_grad_norm_(params, cfg.grad_clip) if cfg.grad_clip > 0
                else torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
        self.optimizer.step()
        self.num_updates += 1
        return {**{f"loss/{k}": v.detach() for k, v in losses.items()}, "lr": lr, "grad_norm": norm.detach()}

    def ready(self) -> bool:
        """Always: the dataset is all there."""
        return True

    def iteration_done(self, collected: int, updated: bool, final: bool) -> bool:
        """A log row every ``log_interval`` gradient steps (``collected`` counts them offline) and at the end."""
        return collected >= self.cfg.log_interval or final

    def act(self, obs: Obs, deterministic: bool = False) -> torch.Tensor:
        """Refused: the VLA acts from cameras, instructions and joint positions through :meth:`policy`."""
        raise NotImplementedError("agent=vla acts through policy() (robot_rl.train.vla_eval.VLAPlayer), not obs")

    def observe(self, obs: Obs, action: torch.Tensor, step: Any) -> None:
        """Nothing: the agent learns from its dataset only (the runner steps no env for an offline agent)."""

    # --- what is saved and deployed -------------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The VLA."""
        return {"model": self.model}

    def train_mode(self, training: bool) -> None:
        """Dropout on while training."""
        self.model.train(training)

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser, batch generator, update count and the tokenizer's JSON text."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "num_updates": self.num_updates,
                "tokenizer": self.tokenizer.to_json()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the checkpoint's tokenizer replaces the one trained at start."""
        from robot_rl.models.vla import InstructionTokenizer

        tokenizer = InstructionTokenizer.from_json(state["tokenizer"])
        if tokenizer.vocab_size != self.model_config.vocab_size:
            raise ValueError(f"checkpoint tokenizer has {tokenizer.vocab_size} tokens, the model "
                             f"{self.model_config.vocab_size}")
        self.tokenizer = tokenizer
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        self.batches = None  # re-tokenised with the checkpoint's tokenizer at the next update

    def policy(self) -> nn.Module:
        """A frozen :class:`~robot_rl.models.vla.policy.VLAPolicy` copy with the tokenizer and instructions."""
        from robot_rl.models.vla.policy import VLAPolicy

        return VLAPolicy(copy.deepcopy(self.model).eval(), self.tokenizer, self.instructions)

    def policy_chunking(self) -> tuple[int, ChunkExecution]:
        """``chunk_len`` actions per query, played as ``execution`` says (open loop: the first ``execute_len``)."""
        cfg = self.cfg
        return cfg.chunk_len, ChunkExecution(cfg.execution, cfg.execute_len, cfg.ensemble_decay)
