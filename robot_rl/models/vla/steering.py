"""Noise-space steering of a frozen flow policy (DSRL: Wagenmaker et al., "Steering Your Diffusion Policy with
Latent Space Reinforcement Learning", 2025).

The VLA maps an initial noise ``w [B, H, A]`` to a chunk deterministically, ``chunk = VLA.sample(obs, w)``
(:mod:`robot_rl.models.vla.flow`: Euler from ``t = 1``). DSRL leaves the VLA frozen and learns a small actor
``pi(w | s)`` over the noise instead of the action: the environment seen through the VLA is an MDP whose action
is ``w``, so SAC applies unchanged with ``action = w`` (:mod:`robot_rl.math.soft_actor_critic`), the critic is
``Q(s, w)`` over the observation feature and the noise, and no gradient ever flows into the VLA.

- :class:`NoiseActor`: SAC's tanh-Gaussian actor, ``feature [B, F] -> w [B, H, A]`` in ``[-bound, bound]``
  (DSRL's noise "action magnitude"; ``bound`` around 1.5-2 covers most of ``N(0, 1)``'s mass).
- :func:`context_feature`: a ``[B, D]`` observation feature from the VLA's own prefix tokens (``[B, 2D]`` with its
  global condition beside them), :func:`context_feature_dim` its width.
- :func:`steer`: (VLA, obs, actor, feature) -> the executed chunk, the noise and its log-probability.
- :class:`SteeredVLAPolicy`: the deployable pair, a :class:`~robot_rl.models.vla.policy.VLAPolicy` whose noise comes
  from the actor's mean (its ``noise`` input is ignored), so evaluation and export play the steered policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from robot_rl.math.soft_actor_critic import squashed_gaussian
from robot_rl.models.mlp import fp32_head, mlp
from robot_rl.models.vla.model import VLA, Context, masked_mean
from robot_rl.models.vla.policy import VLAPolicy
from robot_rl.models.vla.tokenizer import InstructionTokenizer


class ChunkSampler(Protocol):
    """What steering needs of a flow policy: ``sample(obs, noise [B, H, A]) -> chunk [B, H, A]``, deterministic
    given the noise (:meth:`robot_rl.models.vla.VLA.sample`)."""

    def sample(self, obs: dict, noise: torch.Tensor) -> torch.Tensor: ...


class NoiseActor(nn.Module):
    """``w = bound * tanh(u)``, ``u ~ N(mu(feature), sigma(feature)^2)``, ``w [B, H, A]``; ``forward`` is
    ``bound * tanh(mu)``."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, feature_dim: int, chunk_len: int, action_dim: int, bound: float = 1.5,
                 hidden_dims: tuple[int, ...] = (256, 256), act: str = "relu") -> None:
        super().__init__()
        if bound <= 0:
            raise ValueError(f"the noise bound must be > 0, got {bound}")
        self.shape = (chunk_len, action_dim)
        self.bound = float(bound)
        self.net = mlp(feature_dim, hidden_dims, 2 * chunk_len * action_dim, act)

    def _mean_log_std(self, feature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` ``[B, H, A]`` of the pre-tanh Gaussian."""
        mean, log_std = fp32_head(self.net, feature).chunk(2, dim=-1)
        shape = (feature.shape[0], *self.shape)
        return mean.reshape(shape), log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX).reshape(shape)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """Deterministic noise ``[B, H, A]`` for ``feature [B, F]``."""
        return self.bound * torch.tanh(self._mean_log_std(feature)[0])

    def sample(self, feature: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised noise ``[B, H, A]`` and its log-probability ``[B]`` (tanh and bound corrected)."""
        mean, log_std = self._mean_log_std(feature)
        eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        return squashed_gaussian(mean, log_std, eps, self.bound)


def context_feature(context: Context) -> torch.Tensor:
    """``[B, D]`` mean of the VLA's prefix tokens ``context.tokens [B, P, D]`` over the unpadded ones; with a global
    condition (``context.condition [B, D]``, ``global_condition=true``) that condition after it, ``[B, 2D]``: with
    ``action_expert=mlp`` the expert reads the condition alone and the prefix transformer is never trained, so the
    condition is the trained summary of the observation and the token mean a random projection of it."""
    mean = masked_mean(context.tokens, ~context.pad)
    return mean if context.condition is None else torch.cat([mean, context.condition], dim=1)


def context_feature_dim(model: VLA) -> int:
    """The width of :func:`context_feature` for ``model``: ``D``, or ``2D`` with a global condition."""
    return model.config.width * (2 if model.config.global_condition else 1)


@dataclass
class Steered:
    """One steered query: ``chunk [B, H, A]`` (``model.sample(obs, noise)``, no gradient), ``noise [B, H, A]``
    (carries the actor's gradient) and ``log_prob [B]`` (``None`` when deterministic)."""

    chunk: torch.Tensor
    noise: torch.Tensor
    log_prob: torch.Tensor | None


def steer(model: ChunkSampler, obs: dict, actor: NoiseActor, feature: torch.Tensor, deterministic: bool = False,
          generator: torch.Generator | None = None) -> Steered:
    """The chunk the frozen ``model`` executes from the noise ``actor`` picks for ``feature [B, F]``.

    The model runs under ``torch.no_grad()`` on the detached noise: its parameters get no gradient and the chunk
    depends on the actor only through the noise. The actor's gradient comes from a noise critic ``Q(s, w)``
    (:func:`robot_rl.math.soft_actor_critic.actor_loss` on ``Steered.noise``), never through the model.
    """
    if deterministic:
        noise, log_prob = actor(feature), None
    else:
        noise, log_prob = actor.sample(feature, generator)
    with torch.no_grad():
        chunk = model.sample(obs, noise.detach())
    return Steered(chunk, noise, log_prob)


class SteeredVLAPolicy(VLAPolicy):
    """A frozen VLA played from the noise a :class:`NoiseActor` picks (its deterministic mean) for the VLA's own
    :func:`context_feature`; :meth:`forward` keeps :class:`VLAPolicy`'s signature and ignores ``noise``."""

    def __init__(self, model: VLA, tokenizer: InstructionTokenizer, instructions, actor: NoiseActor) -> None:
        super().__init__(model, tokenizer, instructions)
        self.actor = actor

    def forward(self, images: tuple[torch.Tensor, ...], tokens: torch.Tensor, token_mask: torch.Tensor,
                state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Action chunk ``[B, H, A]`` in ``[-1, 1]`` from the actor's noise (``noise`` unused)."""
        obs = {"images": dict(zip(self.cameras, images, strict=True)), "tokens": tokens,
               "token_mask": token_mask, "state": state}
        context = self.model.encode(obs)
        steered = self.actor(context_feature(context))
        return self.model.decode(context, state, steered).clamp(-1.0, 1.0)
