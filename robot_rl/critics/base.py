"""The critic interface every agent talks to (DESIGN.md, contract 5).

A critic estimates how good a state (``V``) or a state and action sequence (``Q``) is. One
interface covers every family the project plans, so agents never branch on the critic's type:

- **Plain and ensemble critics** return ``[E, B, G]`` member estimates from :meth:`Critic.estimates`
  (``E = 1`` for a single network) and a reduced ``[B, G]`` from :meth:`Critic.forward`
  (``reduce="mean" | "min" | "random_min"``; the latter is REDQ's random subset minimum).
- **Distributional critics** (C51, quantiles) still return expected values from ``estimates``;
  their distribution is exposed by :meth:`Critic.distribution`, and their loss by :meth:`Critic.loss`
  against a target of :attr:`Critic.target_shape`.
- **Chunked critics** take an action *sequence* ``[B, H, A]`` (``H = critic.chunk_len``, set by the family from
  its own config); single-step critics (``chunk_len = 1``) take ``[B, A]`` (or ``[B, 1, A]``, squeezed).
- **World-model critics** work on latent states: :meth:`Critic.encode` maps observations
  ``[B, D]`` to the critic's input ``[B, Z]`` (identity for every other family), so an agent can
  always call ``critic(critic.encode(obs), action)``.
- **Multi-critics** output one value per reward group (``G = spec.num_values = len(reward_groups)``);
  single-objective critics have ``G = 1``.

What an agent needs to know about a critic it reads from the critic object, never from the critic's config:
:attr:`Critic.chunk_len`, :attr:`Critic.on_truncation`, :attr:`Critic.subset`, :attr:`Critic.needs_successors`
with :meth:`Critic.aux_loss`, :attr:`Critic.target_shape`, :attr:`Critic.takes_action`. The agent gives the
critic only the env's shapes (:class:`CriticSpec`) and checks the critic it got in one place
(``OffPolicyAgent.check_critic``; PPO gets a V critic, which a family without ``"V"`` in ``kinds`` refuses).

Target networks are part of the critic (``target=True`` evaluates them; :meth:`Critic.update_target`
moves them), so an agent never deep-copies a critic itself.
"""

from __future__ import annotations

import abc
import copy
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn

Reduce = Literal["mean", "min", "random_min", "none"]


@dataclass(frozen=True)
class CriticSpec:
    """The env's shapes a critic is built for; agents fill it from the env, configs never do (what the critic
    itself decides, such as how many actions it scores, it declares as attributes of :class:`Critic`).

    Attributes:
        obs_dim: size ``D`` of the critic's observation (the ``"critic"`` group when the env has
            one, else ``"policy"``).
        action_dim: size ``A`` of one action; 0 for a state-value critic.
        num_values: ``G``, one value per reward group for multi-critics, else 1.
    """

    obs_dim: int
    action_dim: int = 0
    num_values: int = 1

    def __post_init__(self) -> None:
        for name in ("obs_dim", "num_values"):
            if getattr(self, name) < 1:
                raise ValueError(f"CriticSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.action_dim < 0:
            raise ValueError(f"CriticSpec.action_dim must be >= 0, got {self.action_dim}")


class Critic(nn.Module, abc.ABC):
    """Base class of all critics; subclasses implement :meth:`estimates`.

    A critic built with ``spec.action_dim > 0`` is a Q critic, else a V critic; a family that
    supports only one kind lists it in ``kinds`` and construction fails clearly otherwise.
    Shapes: ``B`` batch, ``E`` ensemble members, ``G = spec.num_values``, ``H = chunk_len``,
    ``A = spec.action_dim``.
    """

    kinds: ClassVar[frozenset[str]] = frozenset({"V", "Q"})
    """Which of ``V(s)`` and ``Q(s, a)`` this family can be."""

    subset: int = 2
    """Members the ``random_min`` reduction draws (REDQ's subset; :meth:`forward` uses it); ensemble families set
    theirs in ``__init__``."""

    chunk_len: int = 1
    """``H``, consecutive actions a Q critic scores (1 = single step); chunked families set theirs in ``__init__``.
    Agents size their actors and replay chunks from it."""

    on_truncation: str = "bootstrap"
    """How targets of action chunks cut by a time limit are built, ``bootstrap`` or ``mask``
    (:func:`robot_rl.math.chunk_targets.chunk_return`); chunked families set theirs in ``__init__``."""

    needs_successors: ClassVar[bool] = False
    """True for families whose :meth:`aux_loss` learns from each step's successor (next critic obs, reward,
    done): on-policy agents then add those to every mini-batch and add the loss to the value loss."""

    def __init__(self, spec: CriticSpec) -> None:
        super().__init__()
        kind = "Q" if spec.action_dim > 0 else "V"
        if kind not in self.kinds:
            raise ValueError(
                f"{type(self).__name__} cannot be a {kind} critic (supports {sorted(self.kinds)}); "
                "pick another critic= option for this agent"
            )
        self.spec = spec
        self._target: nn.Module | None = None

    @property
    def takes_action(self) -> bool:
        """True for Q critics (``Q(s, a)``), False for V critics (``V(s)``)."""
        return self.spec.action_dim > 0

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        """Move/cast the target copy along with the online critic (``.to(device)``)."""
        super()._apply(fn, recurse)
        if self._target is not None:
            self._target._apply(fn, recurse)
        return self

    # --- what subclasses implement -------------------------------------------------------------

    @abc.abstractmethod
    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """All member estimates ``[E, B, G]`` of the (expected) value.

        Args:
            obs: ``[B, D]`` observations, or ``[B, Z]`` latents from :meth:`encode`.
            action: ``[B, A]`` or ``[B, H, A]`` for Q critics (see :meth:`check_action`); None for V.
        """

    # --- optional hooks for richer families ----------------------------------------------------

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Map ``[B, D]`` observations to the critic's input (identity except for world models)."""
        return obs

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw observations ``[B, D]`` into input statistics, for critics that normalise."""

    def distribution(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Return distribution parameters ``[E, B, G, K]`` (atoms' logits or quantiles)."""
        raise NotImplementedError(f"{type(self).__name__} is not distributional")

    def aux_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Auxiliary loss and 0-d metrics of families with ``needs_successors`` (world models), from a
        mini-batch holding ``next_critic_obs`` ``[B, Dc]``, ``rewards`` ``[B, G]`` and ``next_valid`` ``[B]``."""
        raise NotImplementedError(f"{type(self).__name__} has no auxiliary loss (needs_successors is False)")

    target_shape: ClassVar[tuple[str, ...]] = ("B", "G")
    """Shape of the target :meth:`loss` expects: ``("B", "G")`` scalar targets by default."""

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor | None, target: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Regression loss of every member towards ``target`` ``[B, G]`` (mean squared error).

        Distributional critics override this with their own loss and ``target_shape``.
        Returns the scalar loss and detached 0-d tensor metrics (no device sync per update).
        """
        pred = self.estimates(obs, action)
        loss = (pred - target.unsqueeze(0)).pow(2).mean()
        return loss, {"critic_loss": loss.detach(), "value_mean": pred.detach().mean()}

    # --- shared behaviour ----------------------------------------------------------------------

    def forward(
        self,
        obs: torch.Tensor,
        action: torch.Tensor | None = None,
        reduce: Reduce = "mean",
        target: bool = False,
    ) -> torch.Tensor:
        """Reduced estimate ``[B, G]`` (or ``[E, B, G]`` with ``reduce="none"``).

        Args:
            obs: ``[B, D]`` (or latents ``[B, Z]``).
            action: ``[B, A]`` / ``[B, H, A]`` for Q critics, None for V critics.
            reduce: ``mean`` / ``min`` over members, ``random_min`` = min over a random :attr:`subset`
                of members (REDQ), ``none`` keeps ``[E, B, G]``.
            target: evaluate the target copy (see :meth:`update_target`), without gradients.
        """
        action = self.check_action(action)
        if target:
            with torch.no_grad():
                values = self.target_critic().estimates(obs, action)
        else:
            values = self.estimates(obs, action)
        return reduce_members(values, reduce, self.subset)

    def check_action(self, action: torch.Tensor | None) -> torch.Tensor | None:
        """Validate ``action`` against :attr:`chunk_len` and the spec; return ``[B, A]`` (H = 1) or ``[B, H, A]``."""
        if not self.takes_action:
            if action is not None:
                raise ValueError(f"{type(self).__name__} is a V critic; call it without an action")
            return None
        if action is None:
            raise ValueError(f"{type(self).__name__} is a Q critic and needs an action")
        H, A = self.chunk_len, self.spec.action_dim
        if action.dim() == 3 and H == 1 and action.shape[1] == 1:
            action = action[:, 0]
        expected = (A,) if H == 1 else (H, A)
        if tuple(action.shape[1:]) != expected:
            raise ValueError(
                f"{type(self).__name__} expects actions [B, {', '.join(map(str, expected))}], "
                f"got {list(action.shape)}"
            )
        return action

    def target_critic(self) -> Critic:
        """The slowly-moving copy used for bootstrapped targets (created on first use)."""
        if self._target is None:
            target = copy.deepcopy(self)
            target._target = None
            target.requires_grad_(False)
            # Stored outside nn.Module's registry so parameters() never returns target weights.
            object.__setattr__(self, "_target", target)
        return self._target  # type: ignore[return-value]

    @torch.no_grad()
    def update_target(self, tau: float) -> None:
        """Polyak update ``target <- (1 - tau) * target + tau * online``; ``tau = 1`` copies."""
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"update_target: tau must be in (0, 1], got {tau}")
        target = self.target_critic()
        online = list(self.parameters())
        torch._foreach_lerp_([p for p in target.parameters()], online, tau)
        for t_buf, buf in zip(target.buffers(), self.buffers(), strict=True):
            t_buf.copy_(buf)

    def has_target(self) -> bool:
        """Whether a target copy exists (it is saved with :meth:`target_state_dict`)."""
        return self._target is not None

    def target_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors of the target copy (empty if none), for checkpoints."""
        return {} if self._target is None else self._target.state_dict()

    def load_target_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the target copy saved by :meth:`target_state_dict`."""
        if state:
            self.target_critic().load_state_dict(state)


def reduce_members(values: torch.Tensor, reduce: Reduce, subset: int = 2) -> torch.Tensor:
    """Reduce member estimates ``[E, B, G]`` to ``[B, G]`` (``none`` returns them unchanged)."""
    if values.dim() != 3:
        raise ValueError(f"critic estimates must be [E, B, G], got {list(values.shape)}")
    if reduce == "none":
        return values
    if reduce == "mean":
        return values.mean(0)
    if reduce == "min":
        return values.min(0).values
    if reduce == "random_min":
        E = values.shape[0]
        if not 1 <= subset <= E:
            raise ValueError(f"random_min subset must be in [1, {E}] members, got {subset}")
        idx = torch.randperm(E, device=values.device)[:subset]
        return values[idx].min(0).values
    raise ValueError(f"unknown reduce {reduce!r}; use one of mean, min, random_min, none")
