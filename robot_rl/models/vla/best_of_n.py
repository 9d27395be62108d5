"""Best-of-N action chunks: sample N chunks from a flow policy, execute the one a critic ranks highest, and
distil the choice back into the policy (PA-RL: Mark et al., "Policy Agnostic RL", 2024; Q-chunking's best-of-N
sampling: Li, Zhou & Levine, 2025).

For each observation, ``N`` initial noises ``w_1..w_N [H, A]`` are decoded in one batched call of
``model.sample`` (the observation repeated ``N`` times), the critic scores every chunk, and the chunk
``a* = chunk[argmax_i Q(s, chunk_i)]`` is executed. Distillation is plain flow matching on ``a*``
(``model.loss(obs, a*, noise, t)``: target velocity ``noise - a*`` at ``x_t = t * noise + (1 - t) * a*``), which
moves the policy's samples toward the chunks the critic prefers.

Shapes: ``B`` observations, ``N`` candidates, ``H`` chunk steps, ``A`` action dims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

ChunkScore = Callable[[torch.Tensor], torch.Tensor]
"""``score(chunks [B, N, H, A]) -> [B, N]``: a critic at the batch's observations, as a function of the chunks."""


class FlowPolicy(Protocol):
    """What best-of-N needs of a flow policy (:class:`robot_rl.models.vla.VLA` has both)."""

    def sample(self, obs: dict, noise: torch.Tensor) -> torch.Tensor: ...

    def loss(self, obs: dict, action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
             action_is_pad: torch.Tensor | None = None) -> torch.Tensor: ...


@dataclass
class BestOfN:
    """The chosen chunk ``[B, H, A]``, its ``index [B]`` among the candidates and its ``noise [B, H, A]``, and every
    candidate's ``values [B, N]``."""

    chunk: torch.Tensor
    index: torch.Tensor
    noise: torch.Tensor
    values: torch.Tensor


def repeat_obs(obs: dict, n: int) -> dict:
    """Every tensor of an observation dict (nested, e.g. ``images``) repeated ``n`` times along the batch:
    row ``b * n + i`` is observation ``b``."""
    return {k: repeat_obs(v, n) if isinstance(v, dict) else v.repeat_interleave(n, dim=0) for k, v in obs.items()}


def pick(values: torch.Tensor, *candidates: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(index [B], *chosen)``: the argmax of ``values [B, N]`` per row and each candidate ``[B, N, *]`` there."""
    index = values.argmax(dim=1)
    rows = torch.arange(values.shape[0], device=values.device)
    return (index, *(c[rows, index] for c in candidates))


@torch.no_grad()
def best_of_n(model: FlowPolicy, obs: dict, noise: torch.Tensor, score: ChunkScore) -> BestOfN:
    """Decode ``noise [B, N, H, A]`` with one ``model.sample`` call and keep each observation's best chunk."""
    if noise.dim() != 4:
        raise ValueError(f"noise must be [B, N, H, A], got {list(noise.shape)}")
    batch, n = noise.shape[:2]
    chunks = model.sample(repeat_obs(obs, n), noise.flatten(0, 1)).unflatten(0, (batch, n))
    values = score(chunks)
    if values.shape != (batch, n):
        raise ValueError(f"score must return [B, N] = [{batch}, {n}], got {list(values.shape)}")
    index, chunk, chosen_noise = pick(values, chunks, noise)
    return BestOfN(chunk, index, chosen_noise, values)


@torch.no_grad()
def rank_candidates(score: Callable[[torch.Tensor], torch.Tensor], candidates: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Best-of-N over anything a critic scores directly (DSRL's noise space: ``Q(s, w)``, no decoding):
    ``candidates [B, N, K]`` -> ``(best [B, K], its value [B], every value [B, N])`` with
    ``score(candidates) -> [B, N]``."""
    values = score(candidates)
    if values.shape != candidates.shape[:2]:
        raise ValueError(f"score must return [B, N] = {list(candidates.shape[:2])}, got {list(values.shape)}")
    _, best, value = pick(values, candidates, values)
    return best, value, values


def distill_loss(model: FlowPolicy, obs: dict, best: BestOfN, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Flow-matching loss of ``model`` on the chosen chunks ``best.chunk`` at fresh ``noise [B, H, A]``, ``t [B]``."""
    return model.loss(obs, best.chunk, noise, t)
