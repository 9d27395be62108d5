"""The deployable VLA: a trained :class:`~robot_rl.models.vla.model.VLA` with its tokenizer, env actions out.

This is what ``agent=vla`` hands out as its policy, what evaluation in sim plays, and what export turns into
an artifact. Its tensor entry point has fixed, torch-free inputs so it can be traced to ONNX with the flow
integration unrolled and the noise as an input:

``forward(images, tokens, token_mask, state, noise) -> actions``

- ``images``: tuple of uint8 ``[B, 3, H, W]``, one per camera of ``model.config.cameras``, in that order
  (RGB, channels first, ``H x W`` the training resolution);
- ``tokens`` int64 ``[B, L]`` and ``token_mask`` bool ``[B, L]``: the instruction, from :meth:`encode_text`;
- ``state`` float ``[B, S]``: joint positions in robot units (the dataset's ``observation.state``);
- ``noise`` float ``[B, H, A]``: the flow's initial noise (zeros for the deterministic policy; the RL
  methods of docs/vla.md steer it);
- returns ``[B, H, A]``: a chunk of the env's policy actions, clipped to ``[-1, 1]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robot_rl.models.vla.model import VLA
from robot_rl.models.vla.tokenizer import InstructionTokenizer


class VLAPolicy(nn.Module):
    """A frozen copy of a VLA plus its tokenizer (see the module docstring for shapes)."""

    def __init__(self, model: VLA, tokenizer: InstructionTokenizer, instructions: Sequence[str] = ()) -> None:
        """``instructions``: the instruction strings the policy was trained on (what a node may list or check)."""
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.instructions = tuple(instructions)

    @property
    def chunk_len(self) -> int:
        """H, actions per query."""
        return self.model.config.chunk_len

    @property
    def cameras(self) -> tuple[str, ...]:
        """Camera names in the order :meth:`forward` takes them."""
        return self.model.config.cameras

    def encode_text(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens int64 [B, L], token_mask bool [B, L])`` of ``texts`` with ``L = max_text_len``."""
        return self.tokenizer.encode(texts, self.model.config.max_text_len)

    def noise_shape(self, batch: int) -> tuple[int, int, int]:
        """``(B, H, A)``, the shape of :meth:`forward`'s ``noise``."""
        c = self.model.config
        return batch, c.chunk_len, c.action_dim

    def forward(self, images: tuple[torch.Tensor, ...], tokens: torch.Tensor, token_mask: torch.Tensor,
                state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Action chunk ``[B, H, A]`` in ``[-1, 1]``; deterministic given ``noise``."""
        obs = {"images": dict(zip(self.cameras, images, strict=True)), "tokens": tokens,
               "token_mask": token_mask, "state": state}
        return self.model.sample(obs, noise).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, images: dict[str, torch.Tensor], texts: Sequence[str], state: torch.Tensor,
            noise: torch.Tensor | None = None) -> torch.Tensor:
        """Chunk ``[B, H, A]`` for camera images ``{name: uint8 [B, 3, H, W]}``, instruction strings (B of them)
        and ``state [B, S]``; ``noise`` defaults to zeros."""
        tokens, mask = self.encode_text(texts)
        device = state.device
        if noise is None:
            noise = torch.zeros(self.noise_shape(state.shape[0]), device=device)
        return self(tuple(images[c] for c in self.cameras), tokens.to(device), mask.to(device), state, noise)
