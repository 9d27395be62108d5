"""A flow-matching vision-language-action model shaped like SmolVLA / pi0, small enough for a CPU.

Observation (a dict; B is the batch):

- ``images``: ``{camera: uint8 or float [B, 3, H, W]}`` for each of ``config.cameras`` (``front`` for
  the sim group ``obs["camera_front"]`` and the dataset feature ``observation.images.front``);
- ``tokens`` int64 ``[B, L]`` and ``token_mask`` bool ``[B, L]`` from :class:`InstructionTokenizer`;
- ``state`` float ``[B, S]`` in dataset units.

``encode(obs)`` runs the prefix transformer over ``[image tokens of every camera, text tokens, state
token]`` and returns the :class:`Context` ``[B, P, D]``. The action expert reads a noisy chunk
``x_t [B, H, A]`` and time ``t [B]``, self-attends over the chunk and cross-attends to the context:
``velocity(x_t, t, context) -> [B, H, A]`` (or, ``action_expert=mlp``, reads the flattened chunk in a residual MLP
modulated by the time and the context's global condition). ``sample(obs, noise)`` integrates it from ``noise`` (t = 1)
to t = 0 (:mod:`robot_rl.models.vla.flow`) and is deterministic given the noise.

Actions and state are standardised inside the model with the dataset's mean/std (:meth:`set_stats`):
``x_t``, ``noise`` and the velocity live in the standardised action space; :meth:`sample` and the
``action`` of :meth:`loss` are in dataset units. With :meth:`set_anchor` the model predicts actions relative to a
linear map of the state (position control: the action that holds the current pose), and the action statistics are
those of that residual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from robot_rl.deploy.vla_schema import RESIZE_RULES
from robot_rl.models.vla import flow
from robot_rl.models.vla.encoders import (
    ConvImageEncoder,
    EfficientNetLite0Encoder,
    InstructedKeypointEncoder,
    check_film_head,
)

IMAGE_ENCODERS = ("conv", "efficientnet_lite0", "efficientnet_lite0_film")
ACTION_EXPERTS = ("transformer", "mlp")


@dataclass(frozen=True)
class VLAConfig:
    """Sizes of a :class:`VLA`. ``VLAConfig.cpu(...)`` / ``VLAConfig.gpu(...)`` with the dims of a dataset."""

    state_dim: int
    action_dim: int
    vocab_size: int
    cameras: tuple[str, ...] = ("front",)
    image_size: int = 64
    """H = W of every camera image, the training resolution (the encoders themselves take any size)."""
    chunk_len: int = 16
    """H, actions per chunk."""
    max_text_len: int = 16
    """L, instruction tokens kept."""
    width: int = 64
    """D, the token width of the prefix transformer and the action expert."""
    heads: int = 4
    prefix_layers: int = 2
    """Transformer layers over the image, text and state tokens."""
    expert_layers: int = 2
    """Action-expert layers (chunk self-attention, cross-attention to the prefix)."""
    ffn_mult: int = 2
    """Feed-forward width of every layer: ``ffn_mult * width``."""
    image_encoder: str = "conv"
    """``conv`` (trained from scratch), ``efficientnet_lite0`` (frozen ImageNet backbone, ``[vla]`` extra) or
    ``efficientnet_lite0_film`` (its frozen early stage read by an instruction-modulated keypoint head:
    ``image_keypoints`` tokens per camera, no grid tokens; :class:`InstructedKeypointEncoder`)."""
    conv_channels: tuple[int, ...] = (16, 32, 64)
    image_grid: int = 4
    """Pooled image tokens per camera: ``image_grid ** 2``."""
    image_keypoints: int = 0
    """K spatial-softmax keypoint tokens per camera: ``conv``, besides the pooled grid (0: none);
    ``efficientnet_lite0_film``, its only tokens (at least 1)."""
    global_condition: bool = False
    """Also condition every chunk token of the action expert directly on an MLP of the standardised state, the
    keypoint coordinates (``efficientnet_lite0_film``) and the instruction's mean token, added like the time
    embedding (Diffusion Policy's global conditioning), besides cross-attending to the prefix: a short path for the
    low-dimensional values a precise reach depends on."""
    condition_text: bool = True
    """Whether the global condition reads the instruction's mean token. An instructed keypoint already says where the
    named object is; beside the state, the instruction only helps the expert tell the demonstrations apart
    (memorise) instead of reading the keypoints: without it a flow expert on reach_lang's keypoints succeeds far more
    often (docs/vla.md, "The flow expert needs more steps than the keypoints")."""
    film_stride: int = 4
    """``efficientnet_lite0_film``: stride of the frozen feature map its keypoint head reads, 4 (24 channels) or 2
    (16 channels: finer keypoints for four times the head's work)."""
    film_kernel: int = 1
    """``efficientnet_lite0_film``: the head's first convolution, ``film_kernel`` x ``film_kernel`` (odd)."""
    action_expert: str = "transformer"
    """``transformer``: chunk self-attention and cross-attention to the prefix (SmolVLA / pi0's expert); ``mlp``: one
    residual MLP from the flattened noisy chunk, modulated by the time and the global condition, to the chunk's
    velocity (:class:`MLPExpert`; Diffusion Policy's and IDQL's low-dimensional experts; needs
    ``global_condition``): it reads only the state, the keypoints and the instruction, with no path to the prefix
    tokens to memorise scenes through."""
    expert_hidden: int = 256
    """``action_expert=mlp``: width of its residual stream (:class:`MLPExpert`, three blocks)."""
    num_steps: int = 10
    """Euler steps of :meth:`VLA.sample` (LeRobot's default for SmolVLA)."""
    frame_resize: str = "none"
    """How the training frames reached ``image_size``: ``none`` (they were that size) or ``nearest`` (resampled by
    :func:`robot_rl.deploy.vla_runtime.resize_nearest`; the export lets the node resample camera images the same way,
    policy.yaml ``vla.resize``)."""
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.width % self.heads or self.width % 2:
            raise ValueError(f"width {self.width} must be even and a multiple of heads {self.heads}")
        if self.image_encoder not in IMAGE_ENCODERS:
            raise ValueError(f"image_encoder {self.image_encoder!r}: use one of {IMAGE_ENCODERS}")
        if self.image_keypoints and self.image_encoder == "efficientnet_lite0":
            raise ValueError(f"image_keypoints {self.image_keypoints} needs image_encoder 'conv' or "
                             "'efficientnet_lite0_film'")
        check_film_head(self.film_stride, self.film_kernel)
        if self.image_encoder == "efficientnet_lite0_film" and self.image_keypoints < 1:
            raise ValueError("image_encoder 'efficientnet_lite0_film' needs image_keypoints >= 1")
        if self.frame_resize not in RESIZE_RULES:
            raise ValueError(f"frame_resize {self.frame_resize!r}: use one of {RESIZE_RULES} (policy.yaml vla.resize)")
        if self.action_expert not in ACTION_EXPERTS:
            raise ValueError(f"action_expert {self.action_expert!r}: use one of {ACTION_EXPERTS}")
        if self.action_expert == "mlp" and not self.global_condition:
            raise ValueError("action_expert 'mlp' reads the global condition: set global_condition")

    @classmethod
    def cpu(cls, state_dim: int, action_dim: int, vocab_size: int, **overrides) -> VLAConfig:
        """~0.2M parameters: trains at a few hundred ms per batch-64 step on one CPU thread."""
        return replace(cls(state_dim, action_dim, vocab_size), **overrides)

    @classmethod
    def gpu(cls, state_dim: int, action_dim: int, vocab_size: int, **overrides) -> VLAConfig:
        """~10M parameters: width 256, 6 + 6 layers, 8x8 image grid, 50-step chunks."""
        base = cls(state_dim, action_dim, vocab_size, chunk_len=50, max_text_len=32, width=256, heads=8,
                   prefix_layers=6, expert_layers=6, ffn_mult=4, conv_channels=(32, 64, 128, 256), image_grid=8)
        return replace(base, **overrides)


@dataclass
class Context:
    """What the action expert attends to: ``tokens [B, P, D]`` and ``pad [B, P]`` (True = ignore), plus
    ``condition [B, D]`` added to every chunk token (``VLAConfig.global_condition``; None without)."""

    tokens: torch.Tensor
    pad: torch.Tensor
    condition: torch.Tensor | None = None

    def detached(self) -> Context:
        """The same context with no gradient back into what encoded it (the expert still trains through it)."""
        return Context(self.tokens.detach(), self.pad, None if self.condition is None else self.condition.detach())


def masked_mean(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``[B, D]`` the mean of ``x [B, L, D]`` over the positions ``keep [B, L]`` (bool) marks; 0 where none is kept."""
    weight = keep.unsqueeze(-1).to(x.dtype)
    return (x * weight).sum(1) / weight.sum(1).clamp_min(1.0)


def time_embedding(t: torch.Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> torch.Tensor:
    """Sine-cosine embedding ``[B, dim]`` of times ``t [B]`` over periods ``min_period..max_period`` (pi0's)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=t.dtype, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = 2.0 * math.pi * t[:, None] / period[None, :]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


def keypoint_loss(points: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared distance between keypoints ``points [B, C, 2]`` and image positions ``target [B, C, 2]`` (both
    in [-1, 1]), over the entries whose target lies in the frame (finite, ``|x|, |y| <= 1``); 0 if none does."""
    inside = torch.isfinite(target).all(-1) & (target.abs() <= 1.0).all(-1)  # [B, C]
    if not inside.any():
        return points.sum() * 0.0
    return (points[inside] - target[inside]).pow(2).sum(-1).mean()


class MLPExpert(nn.Module):
    """``action_expert=mlp``: residual MLP blocks over a flattened chunk, each modulated (FiLM: a scale and a shift
    per hidden unit) by the condition, as Diffusion Policy's conditional residual blocks. ``forward(x [B, F],
    condition [B, C]) -> [B, F]``."""

    def __init__(self, features: int, condition: int, hidden: int, blocks: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(blocks))
        self.films = nn.ModuleList(nn.Linear(condition, 2 * hidden) for _ in range(blocks))
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(),
                                                  nn.Linear(2 * hidden, hidden)) for _ in range(blocks))
        self.out = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, features))

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, film, block in zip(self.norms, self.films, self.blocks, strict=True):
            scale, shift = film(condition).chunk(2, dim=-1)
            h = h + block(norm(h) * (1.0 + scale) + shift)
        return self.out(h)


class VLA(nn.Module):
    """Prefix transformer over image, text and state tokens, plus a flow-matching action expert."""

    def __init__(self, config: VLAConfig) -> None:
        super().__init__()
        self.config = c = config
        if c.image_encoder == "conv":
            self.image_encoder: nn.Module = ConvImageEncoder(c.width, c.conv_channels, c.image_grid,
                                                             c.image_keypoints)
        elif c.image_encoder == "efficientnet_lite0":
            self.image_encoder = EfficientNetLite0Encoder(c.width, c.image_grid)
        else:
            self.image_encoder = InstructedKeypointEncoder(c.width, c.image_keypoints, stride=c.film_stride,
                                                           kernel=c.film_kernel)
        self.camera_embed = nn.Parameter(torch.zeros(len(c.cameras), c.width))
        self.token_embed = nn.Embedding(c.vocab_size, c.width, padding_idx=0)
        self.text_pos = nn.Parameter(torch.zeros(c.max_text_len, c.width))
        self.state_proj = nn.Linear(c.state_dim, c.width)
        self.prefix = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(c.width, c.heads, c.ffn_mult * c.width, c.dropout, "gelu",
                                       batch_first=True, norm_first=True),
            c.prefix_layers, enable_nested_tensor=False)
        self.prefix_norm = nn.LayerNorm(c.width)
        if c.action_expert == "mlp":
            self.expert: nn.Module = MLPExpert(c.chunk_len * c.action_dim, 2 * c.width, c.expert_hidden)
        else:
            self.action_in = nn.Linear(c.action_dim, c.width)
            self.action_time = nn.Sequential(nn.Linear(2 * c.width, c.width), nn.SiLU(),
                                             nn.Linear(c.width, c.width))
            self.chunk_pos = nn.Parameter(torch.zeros(c.chunk_len, c.width))
            self.expert = nn.TransformerDecoder(
                nn.TransformerDecoderLayer(c.width, c.heads, c.ffn_mult * c.width, c.dropout, "gelu",
                                           batch_first=True, norm_first=True),
                c.expert_layers)
            self.action_out = nn.Sequential(nn.LayerNorm(c.width), nn.Linear(c.width, c.action_dim))
        if c.global_condition:
            points = 2 * len(c.cameras) * c.image_keypoints if c.image_encoder == "efficientnet_lite0_film" else 0
            text = c.width if c.condition_text else 0
            self.condition = nn.Sequential(nn.Linear(c.state_dim + points + text, 4 * c.width), nn.GELU(),
                                           nn.Linear(4 * c.width, c.width))
        for p in (self.camera_embed, self.text_pos):
            nn.init.normal_(p, std=0.02)
        if c.action_expert == "transformer":
            nn.init.normal_(self.chunk_pos, std=0.02)
        self.register_buffer("state_mean", torch.zeros(c.state_dim))
        self.register_buffer("state_std", torch.ones(c.state_dim))
        self.register_buffer("action_mean", torch.zeros(c.action_dim))
        self.register_buffer("action_std", torch.ones(c.action_dim))
        self.register_buffer("anchor_weight", torch.zeros(c.action_dim, c.state_dim))
        self.register_buffer("anchor_bias", torch.zeros(c.action_dim))

    @torch.no_grad()
    def set_stats(self, state_mean: torch.Tensor, state_std: torch.Tensor, action_mean: torch.Tensor,
                  action_std: torch.Tensor, eps: float = 1e-3) -> None:
        """Standardise state ``[S]`` and actions ``[A]`` with these (std floored at ``eps``)."""
        self.state_mean.copy_(state_mean)
        self.state_std.copy_(state_std.clamp_min(eps))
        self.action_mean.copy_(action_mean)
        self.action_std.copy_(action_std.clamp_min(eps))

    @torch.no_grad()
    def set_anchor(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Predict actions relative to ``anchor(state) = state @ weight.T + bias`` (``weight [A, S]``, ``bias [A]``;
        zeros, the default: absolute actions). ``set_stats``' action mean/std are then those of the residual."""
        self.anchor_weight.copy_(weight)
        self.anchor_bias.copy_(bias)

    def anchor(self, state: torch.Tensor) -> torch.Tensor:
        """``[B, 1, A]``: what every chunk step of state ``[B, S]`` (dataset units) is predicted relative to."""
        return (state @ self.anchor_weight.T + self.anchor_bias).unsqueeze(1)

    @property
    def instructed_images(self) -> bool:
        """Whether the image encoder reads the instruction (``efficientnet_lite0_film``); its frozen features can then
        be computed ahead (:meth:`image_features`) and passed as ``obs["image_features"]``."""
        return isinstance(self.image_encoder, InstructedKeypointEncoder)

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """Frozen features ``[B, F, H/s, W/s]`` (``film_stride`` s; F 24 at 4, 16 at 2) of images ``[B, 3, H, W]``
        (``efficientnet_lite0_film`` only)."""
        return self.image_encoder.features(images)

    def encode(self, obs: dict) -> Context:
        """The prefix tokens ``[B, C*(grid^2 + keypoints) + L + 1, D]`` of observation ``obs`` (module docstring);
        with ``efficientnet_lite0_film``, ``[B, C*keypoints + L + 1, D]`` from ``obs["images"]``, precomputed
        ``obs["image_features"]`` (``{camera: [B, F, H/s, W/s]}``, :meth:`image_features`) or precomputed
        ``obs["keypoints"]`` (``[B, C, K, 2]``, :meth:`keypoints`: the head is then skipped). The state token reads
        ``obs["state_seen"]`` where given (training's noisy state, ``agent.state_noise``), else ``obs["state"]``; the
        anchor always uses ``obs["state"]``."""
        return self.encode_with_keypoints(obs)[0]

    def encode_with_keypoints(self, obs: dict) -> tuple[Context, torch.Tensor | None]:
        """:meth:`encode`'s context and, with ``efficientnet_lite0_film``, every camera's keypoints ``[B, C, K, 2]`` it
        was made from (None otherwise), from one pass (post-training that supervises the keypoints it acts on)."""
        c = self.config
        ids, mask = obs["tokens"][:, : c.max_text_len], obs["token_mask"][:, : c.max_text_len]
        words = self.token_embed(ids)  # [B, L, D]
        text = self.instruction_summary(ids, mask, words)
        points = None
        if self.instructed_images:
            cached = obs.get("image_features")
            located = obs.get("keypoints")  # [B, C, K, 2] of a frozen head (agent.expert_updates)
            per_camera = [located[:, i] if located is not None
                          else self.image_encoder.points(cached[cam] if cached is not None
                                                         else self.image_encoder.features(obs["images"][cam]), text)
                          for i, cam in enumerate(c.cameras)]  # C x [B, K, 2]
            tokens = [self.image_encoder.tokens(p) + self.camera_embed[i] for i, p in enumerate(per_camera)]
            points = torch.stack(per_camera, dim=1)
        else:
            tokens = [self.image_encoder(obs["images"][cam]) + self.camera_embed[i] for i, cam in enumerate(c.cameras)]
        tokens.append(words + self.text_pos[: ids.shape[1]])
        state = (obs.get("state_seen", obs["state"]) - self.state_mean) / self.state_std
        tokens.append(self.state_proj(state).unsqueeze(1))
        x = torch.cat(tokens, dim=1)
        batch = x.shape[0]
        image_pad = torch.zeros(batch, x.shape[1] - ids.shape[1] - 1, dtype=torch.bool, device=x.device)
        pad = torch.cat([image_pad, ~mask, torch.zeros(batch, 1, dtype=torch.bool, device=x.device)], dim=1)
        condition = None
        if c.global_condition:
            low_dim = [state, *([points.flatten(1)] if points is not None else []),
                       *([text] if c.condition_text else [])]
            condition = self.condition(torch.cat(low_dim, dim=1))
        return Context(self.prefix_norm(self.prefix(x, src_key_padding_mask=pad)), pad, condition), points

    def instruction_summary(self, tokens: torch.Tensor, mask: torch.Tensor,
                            words: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, D]`` the mean embedding of each instruction's kept tokens (``tokens``, ``mask`` ``[B, L]``; ``words``
        ``[B, L, D]`` their embeddings where already computed): what the keypoint head and the global condition read."""
        tokens, mask = tokens[:, : self.config.max_text_len], mask[:, : self.config.max_text_len]
        return masked_mean(self.token_embed(tokens) if words is None else words, mask)

    def keypoint_parameters(self) -> list[nn.Parameter]:
        """What :meth:`keypoints` depends on and training may change (``efficientnet_lite0_film``): the head's layers
        and the token embedding (the instruction modulates the head)."""
        if not self.instructed_images:
            raise ValueError(f"image_encoder {self.config.image_encoder!r} has no instructed keypoints")
        head = self.image_encoder
        return [*head.inp.parameters(), *head.film.parameters(), *head.logits.parameters(), head.log_temperature,
                self.token_embed.weight]

    def head_parameters(self) -> list[nn.Parameter]:
        """What turns the frozen image features, instruction and joints into the action expert's input
        (``efficientnet_lite0_film``): :meth:`keypoint_parameters` and, with ``global_condition``, the condition MLP
        (post-training that trains the perception along with the expert, ``agent=vla_ppo agent.head_lr``)."""
        condition = list(self.condition.parameters()) if self.config.global_condition else []
        return [*self.keypoint_parameters(), *condition]

    def keypoints(self, obs: dict) -> torch.Tensor:
        """``[B, C, K, 2]`` the image keypoints of ``obs``, x right and y down in [-1, 1]
        (``efficientnet_lite0_film``)."""
        if not self.instructed_images:
            raise ValueError(f"image_encoder {self.config.image_encoder!r} has no instructed keypoints")
        return self.encode_with_keypoints(obs)[1]

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor, context: Context) -> torch.Tensor:
        """Predicted ``dx_t/dt`` ``[B, H, A]`` of noisy standardised chunks ``x_t [B, H, A]`` at times ``t [B]``
        (``H`` = ``chunk_len`` for ``action_expert=mlp``, at most that for ``transformer``)."""
        if self.config.action_expert == "mlp":
            emb = time_embedding(t.to(x_t.dtype), self.config.width)
            return self.expert(x_t.flatten(1), torch.cat([emb, context.condition], dim=1)).view_as(x_t)
        h = self.action_in(x_t)  # [B, H, D]
        emb = time_embedding(t.to(h.dtype), h.shape[-1]).unsqueeze(1).expand_as(h)
        h = self.action_time(torch.cat([h, emb], dim=-1)) + self.chunk_pos[: h.shape[1]]
        if context.condition is not None:
            h = h + context.condition.unsqueeze(1)
        h = self.expert(h, context.tokens, memory_key_padding_mask=context.pad)
        return self.action_out(h)

    def sample(self, obs: dict, noise: torch.Tensor) -> torch.Tensor:
        """Action chunk ``[B, H, A]`` in dataset units, Euler-integrated from ``noise [B, H, A]``; deterministic
        given the noise (in eval mode where ``dropout > 0``)."""
        return self.decode(self.encode(obs), obs["state"], noise)

    def decode(self, context: Context, state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """:meth:`sample` from the ``context`` of :meth:`encode`: the chunk ``[B, H, A]`` (dataset units)
        Euler-integrated from ``noise [B, H, A]``, anchored at ``state [B, S]`` (a caller that also reads the
        context, e.g. noise steering, encodes once)."""
        return self.to_actions(self.denoise(context, noise), state)

    def denoise(self, context: Context, noise: torch.Tensor) -> torch.Tensor:
        """The standardised chunks ``x0 [B, H, A]`` that :meth:`decode` maps to actions: Euler-integrated from
        ``noise [B, H, A]`` at ``t = 1`` to ``t = 0`` (``config.num_steps`` steps) under the ``context``."""
        return flow.euler_sample(lambda x, t: self.velocity(x, t, context), noise, self.config.num_steps)

    def to_actions(self, x0: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Standardised chunks ``x0 [B, H, A]`` (the flow's samples) in dataset units, anchored at ``state [B, S]``
        (a sampler of its own, e.g. flow PPO's stochastic chain, ends here as :meth:`decode` does)."""
        return x0 * self.action_std + self.action_mean + self.anchor(state)

    def loss(self, obs: dict, action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
             action_is_pad: torch.Tensor | None = None) -> torch.Tensor:
        """Flow-matching loss of chunks ``action [B, H, A]`` (dataset units) at ``noise [B, H, A]``, ``t [B]``.

        ``action_is_pad`` bool ``[B, H]`` drops chunk steps past the episode end.
        """
        return self.losses(obs, action, noise, t, action_is_pad)["flow"]

    def losses(self, obs: dict, action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
               action_is_pad: torch.Tensor | None = None,
               keypoint_target: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``{"flow": }`` :meth:`loss`, plus ``"keypoint"`` ``[P]`` where ``keypoint_target [B, C, P, 2]`` is given
        (``efficientnet_lite0_film``, ``P <= image_keypoints``): :func:`keypoint_loss` of keypoint ``p`` of every
        camera against ``keypoint_target[:, :, p]``, for each ``p``."""
        a = (action - self.anchor(obs["state"]) - self.action_mean) / self.action_std
        context, points = self.encode_with_keypoints(obs)
        predicted = self.velocity(flow.interpolate(a, noise, t), t, context)
        out = {"flow": flow.flow_loss(predicted, a, noise, None if action_is_pad is None else ~action_is_pad)}
        if keypoint_target is not None:
            if points is None:
                raise ValueError(f"a keypoint loss needs image_encoder 'efficientnet_lite0_film', not "
                                 f"{self.config.image_encoder!r}")
            out["keypoint"] = torch.stack([keypoint_loss(points[:, :, p], keypoint_target[:, :, p])
                                           for p in range(keypoint_target.shape[2])])
        return out

    def expert_modules(self) -> list[nn.Module]:
        """The action expert: what :meth:`velocity` computes from a given :class:`Context` (the prefix that makes
        the context stays out; RL fine-tuning of the expert alone trains these)."""
        if self.config.action_expert == "mlp":
            return [self.expert]
        return [self.action_in, self.action_time, self.expert, self.action_out]

    def expert_parameters(self) -> list[nn.Parameter]:
        """Parameters of :meth:`expert_modules` and (``transformer``) the chunk position embedding."""
        extra = [self.chunk_pos] if self.config.action_expert == "transformer" else []
        return [p for m in self.expert_modules() for p in m.parameters()] + extra

    def num_parameters(self, trainable: bool = True) -> int:
        """Parameter count (only those with gradients when ``trainable``)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable)
