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

from robot_rl.errors import InputError
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

    def check_inputs(self, images: dict[str, torch.Tensor], texts: Sequence[str], state: torch.Tensor) -> None:
        """Refuse what :meth:`act` cannot take: a missing camera, an image that is not uint8 ``[B, 3, H, W]`` at the
        training size, an empty instruction or (when :attr:`instructions` is set) one it was not trained on, a state
        that is not ``[B, S]``.

        Raises:
            InputError: naming the input and what it should be.
        """
        c = self.model.config
        batch = state.shape[0] if state.dim() == 2 else -1
        if state.shape != (batch, c.state_dim):
            raise InputError("state must be [B, S] joint positions", key="state", value=list(state.shape),
                             fix=f"pass [B, {c.state_dim}] joint positions in robot units")
        want = (batch, 3, c.image_size, c.image_size)
        for cam in self.cameras:
            image = images.get(cam)
            if image is None:
                raise InputError("a camera image the policy needs is missing", key=cam, value=sorted(images),
                                 fix=f"give every camera of {list(self.cameras)} (sim: task.env.cameras=...)")
            if image.dtype != torch.uint8 or tuple(image.shape) != want:
                raise InputError("wrong image: the policy takes uint8 RGB at its training size", key=cam,
                                 value=f"{image.dtype} {list(image.shape)}",
                                 fix=f"uint8 {list(want)} (e.g. task.env.image_size={c.image_size})")
        if len(texts) != batch:
            raise InputError("one instruction per batch row", key="texts", value=len(texts), fix=f"{batch} strings")
        for text in texts:
            if not text.strip():
                raise InputError("empty instruction", key="texts", value=text,
                                 fix=f"one of the trained instructions, e.g. {self.instructions[:2]}")
            if self.instructions and text not in self.instructions:
                raise InputError("unknown instruction: the policy was not trained on it", key="texts", value=text,
                                 fix=f"one of the {len(self.instructions)} trained instructions, e.g. "
                                     f"{list(self.instructions[:2])}")

    @torch.no_grad()
    def act(self, images: dict[str, torch.Tensor], texts: Sequence[str], state: torch.Tensor,
            noise: torch.Tensor | None = None) -> torch.Tensor:
        """Chunk ``[B, H, A]`` for camera images ``{name: uint8 [B, 3, H, W]}``, instruction strings (B of them)
        and ``state [B, S]``; ``noise`` defaults to zeros. :class:`InputError` on bad inputs (:meth:`check_inputs`)."""
        self.check_inputs(images, texts, state)
        tokens, mask = self.encode_text(texts)
        device = state.device
        if noise is None:
            noise = torch.zeros(self.noise_shape(state.shape[0]), device=device)
        return self(tuple(images[c] for c in self.cameras), tokens.to(device), mask.to(device), state, noise)
