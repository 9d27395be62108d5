"""World-model critics: a latent model trained jointly with its value heads (TD-MPC2's planner over it is
:mod:`robot_rl.agents.mppi`).

``critic=world_model`` follows TD-MPC2 (Hansen, Su & Wang, "TD-MPC2: Scalable, Robust World Models
for Continuous Control", ICLR 2024). Its latent is also what MR.Q / DR.Q call a model-based
representation for a model-free critic (Fujimoto et al., "Towards General-Purpose Model-Free
Reinforcement Learning", ICLR 2025; Lyu et al., "Debiased Model-based Representations for
Sample-efficient Continuous Control" (DR.Q), arXiv:2605.11711, 2026): an agent may learn its policy
model-free on the latent instead of planning. DR.Q's mutual-information term and faded prioritised
replay are not implemented here.

- encoder ``z = h(o)`` (MLP, then simplicial normalisation: groups of ``simnorm_dim`` softmaxed),
- latent dynamics ``z' = d(z, a)``, reward head ``r(z, a)`` ``[B, G]``,
- an ensemble of ``E`` Q heads ``Q_e(z, a)`` (targets use the minimum of two random members).

``value_head`` picks how the reward and Q heads regress: ``scalar`` outputs one number per
group trained with squared error; ``two_hot`` (TD-MPC2's discrete regression) outputs ``num_bins``
logits per group over bins on ``[vmin, vmax]`` in symlog space, trained with cross-entropy against the
two-hot encoding of ``symlog(target)`` and read out as ``symexp(E[bins])`` (:mod:`robot_rl.math.two_hot`);
its last layers start at zero (uniform logits, a read-out of 0), as in TD-MPC2. Every public method
(:meth:`estimates`, :meth:`predict_reward`, :meth:`td_targets`) returns read-out scalars
either way; only the losses see the logits. A V critic's value is trained by the agent's own
value loss (PPO: squared error) and stays scalar; there ``value_head`` applies to the reward head of
:meth:`latent_loss`.

Every MLP has LayerNorm after each hidden layer (TD-MPC2's ``NormedLinear``): without it the TD
fixed point drifted far on the toy test system (mean |Q error| ~40% of |Q| after 2000 updates).

:meth:`WorldModelCritic.rollout_loss` unrolls the dynamics ``T`` steps from the first encoded
observation and sums, with weights ``rho^t``: latent consistency ``||d(z_t, a_t) - sg(h(o_{t+1}))||^2``,
reward regression, and TD regression of every Q head at the *predicted* latents. Q critics work on
latents: agents call ``critic(critic.encode(obs), action)`` (the critic interface contract).

MPPI planning over this model belongs to the agent that plans (:mod:`robot_rl.agents.mppi`, used by
``agent=tdmpc``); it reads the model through :meth:`encode`, :meth:`next`, :meth:`predict_reward` and
:meth:`estimates`.

As a **V critic** (``action_dim = 0``, for PPO) it is World-Critic-Model style: ``V(h(o))`` is
trained end to end on returns by the agent's value loss, and :meth:`WorldModelCritic.latent_loss`
adds the prediction of the next latent (and reward) from ``z_t`` under the acting policy, so the
value's representation must also carry the dynamics. For V critics :meth:`encode` is the identity
(the encoder is applied inside :meth:`estimates`, so PPO's ``critic(obs)`` works unchanged). PPO calls
:meth:`WorldModelCritic.aux_loss` (its auxiliary-loss hook) on every mini-batch and adds it to the value
loss; ``aux_coef = 0`` switches it off (value trained on returns only).

Shapes: ``T`` rollout steps, ``B`` batch, ``D`` obs, ``Z`` latent, ``A`` actions, ``E`` Q heads, ``G`` groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from robot_rl.critics.base import Critic, CriticSpec, reduce_members
from robot_rl.critics.registry import register_critic
from robot_rl.math.two_hot import check_bins, two_hot_cross_entropy, two_hot_inv
from robot_rl.models.mlp import activation
from robot_rl.models.normalizer import EmpiricalNormalizer

VALUE_HEADS = ("scalar", "two_hot")
TD_ENCODERS = ("target", "online")


def normed_mlp(in_dim: int, hidden_dims: list[int], out_dim: int, act: str) -> nn.Sequential:
    """``[B, in] -> [B, out]``: Linear, LayerNorm, activation per hidden layer (TD-MPC2's NormedLinear)."""
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden_dims:
        layers += [nn.Linear(last, h), nn.LayerNorm(h), activation(act)]
        last = h
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


class SimNorm(nn.Module):
    """Simplicial normalisation: ``[B, Z]`` split into ``Z / V`` groups of ``V``, each softmaxed."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., Z] -> [..., Z]``, every group of ``V`` entries sums to 1."""
        shape = x.shape
        return x.reshape(*shape[:-1], -1, self.group).softmax(-1).reshape(shape)


@dataclass
class WorldModelCriticConfig:
    """``critic=world_model`` (TD-MPC2's defaults scaled down for small tasks).

    Attributes:
        latent_dim: ``Z``; a multiple of ``simnorm_dim``.
        simnorm_dim: group size of the simplicial normalisation (0 = LayerNorm + tanh instead).
        hidden_dims, activation: every MLP (encoder, dynamics, reward, Q heads, V head).
        num_q: ``E`` Q heads (TD-MPC2: 5; targets take the min of 2 random heads).
        normalize_obs: running observation normalisation before the encoder.
        rho: temporal weight ``rho^t`` of the losses along the latent rollout.
        consistency_coef, reward_coef, value_coef: loss weights (TD-MPC2: 20, 0.1, 0.1).
        aux_coef: V kind: weight of :meth:`WorldModelCritic.aux_loss` in PPO's loss (0 = returns only).
        value_head: ``scalar`` (squared-error regression) or ``two_hot`` (TD-MPC2's cross-entropy over
            ``num_bins`` symlog bins on ``[vmin, vmax]``) for the reward and Q heads (V kind: the reward
            head only; PPO trains the value itself).
        num_bins, vmin, vmax: the two-hot bins (TD-MPC2: 101 on ``[-10, 10]`` in symlog space).
        td_encoder: which encoder embeds ``o'`` for the TD target: ``target`` (the Polyak copy, moving with the
            target Q heads; our first choice, with which docs/results/critics.md was measured) or ``online``
            (TD-MPC2: the current encoder without gradient; only the Q heads have target copies there).
    """

    latent_dim: int = 64
    simnorm_dim: int = 8
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "elu"
    num_q: int = 5
    normalize_obs: bool = False
    rho: float = 0.5
    consistency_coef: float = 20.0
    reward_coef: float = 0.1
    value_coef: float = 0.1
    aux_coef: float = 1.0
    value_head: str = "scalar"
    num_bins: int = 101
    vmin: float = -10.0
    vmax: float = 10.0
    td_encoder: str = "target"

    def __post_init__(self) -> None:
        if self.latent_dim < 1 or (self.simnorm_dim and self.latent_dim % self.simnorm_dim):
            raise ValueError(
                f"critic.latent_dim={self.latent_dim} must be >= 1 and a multiple of simnorm_dim={self.simnorm_dim}"
            )
        if self.num_q < 2:
            raise ValueError(f"critic.num_q must be >= 2 (targets take the min of two heads), got {self.num_q}")
        if not 0.0 < self.rho <= 1.0:
            raise ValueError(f"critic.rho must be in (0, 1], got {self.rho}")
        if self.aux_coef < 0:
            raise ValueError(f"critic.aux_coef must be >= 0, got {self.aux_coef}")
        if self.td_encoder not in TD_ENCODERS:
            raise ValueError(f"critic.td_encoder must be one of {TD_ENCODERS}, got {self.td_encoder!r}")
        if self.value_head not in VALUE_HEADS:
            raise ValueError(f"critic.value_head must be one of {VALUE_HEADS}, got {self.value_head!r}")
        if self.value_head == "two_hot":
            check_bins(self.num_bins, self.vmin, self.vmax, prefix="critic.")


@register_critic("world_model", WorldModelCriticConfig)
class WorldModelCritic(Critic):
    """Encoder + latent dynamics + reward + Q ensemble (Q kind) or latent-predictive V (V kind)."""

    needs_successors: ClassVar[bool] = True

    def __init__(self, spec: CriticSpec, cfg: WorldModelCriticConfig) -> None:
        super().__init__(spec)
        self.cfg = cfg
        self.subset = 2
        self.latent_dim = cfg.latent_dim
        """``Z``, the size of :meth:`encode`'s latent (an agent's latent policy reads it)."""
        self.rho = cfg.rho
        """Temporal weight ``rho^t`` of losses along a latent rollout (an agent weights its own losses alike)."""
        Z, A, G, dims = cfg.latent_dim, spec.action_dim, spec.num_values, list(cfg.hidden_dims)
        self.normalizer = EmpiricalNormalizer(spec.obs_dim) if cfg.normalize_obs else nn.Identity()
        squash = SimNorm(cfg.simnorm_dim) if cfg.simnorm_dim else nn.Sequential(nn.LayerNorm(Z), nn.Tanh())
        self.encoder = nn.Sequential(normed_mlp(spec.obs_dim, dims, Z, cfg.activation), squash)
        self.dynamics = nn.Sequential(normed_mlp(Z + A, dims, Z, cfg.activation), squash)
        self.two_hot = cfg.value_head == "two_hot"
        K = cfg.num_bins if self.two_hot else 1
        self.reward = normed_mlp(Z + A, dims, G * K, cfg.activation)
        if self.takes_action:
            self.q_heads = nn.ModuleList(normed_mlp(Z + A, dims, G * K, cfg.activation) for _ in range(cfg.num_q))
        else:
            self.v_head = normed_mlp(Z, dims, G, cfg.activation)
        if self.two_hot:  # TD-MPC2: zero last layers, uniform logits, every read-out starts at 0
            for head in [self.reward, *(self.q_heads if self.takes_action else [])]:
                nn.init.zeros_(head[-1].weight)
                nn.init.zeros_(head[-1].bias)

    # --- the critic interface ------------------------------------------------------------------

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Q kind: latent ``[B, Z]`` of raw ``obs`` ``[B, D]``. V kind: identity (encoded inside)."""
        return self._encode(obs) if self.takes_action else obs

    def _encode(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.normalizer(obs))

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Q kind: ``[E, B, G]`` for latents ``[B, Z]`` and actions ``[B, A]``; V kind: ``[1, B, G]`` for obs."""
        action = self.check_action(action)
        if not self.takes_action:
            return self.v_head(self._encode(obs)).unsqueeze(0)
        return self.readout(self._q_outputs(obs, action, range(self.cfg.num_q)))

    def _q_outputs(self, z: torch.Tensor, action: torch.Tensor, heads: Iterable[int]) -> torch.Tensor:
        """Raw outputs ``[len(heads), B, G * K]`` of the chosen Q heads (``K = 1`` for scalar heads)."""
        x = torch.cat([z, action], dim=-1)
        return torch.stack([self.q_heads[i](x) for i in heads])

    def readout(self, out: torch.Tensor) -> torch.Tensor:
        """Scalars ``[..., G]`` from raw reward/Q outputs ``[..., G * K]``: identity for ``scalar`` heads,
        ``symexp(E[bins])`` of the ``[..., G, K]`` logits for ``two_hot`` heads."""
        if not self.two_hot:
            return out
        return two_hot_inv(out.unflatten(-1, (-1, self.cfg.num_bins)), self.cfg.vmin, self.cfg.vmax)

    def regression_error(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-sample error ``[...]`` of raw outputs ``[..., G * K]`` against scalar targets ``[..., G]``, mean
        over groups: squared error (``scalar``) or cross-entropy against ``two_hot(symlog(target))``."""
        if not self.two_hot:
            return (out - target).pow(2).mean(-1)
        logits = out.unflatten(-1, (-1, self.cfg.num_bins))
        return two_hot_cross_entropy(logits, target, self.cfg.vmin, self.cfg.vmax).mean(-1)

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` ``[B, D]`` into the encoder's input statistics (when normalising)."""
        if isinstance(self.normalizer, EmpiricalNormalizer):
            self.normalizer.update(obs)

    # --- the model -----------------------------------------------------------------------------

    def next(self, z: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted next latent ``[B, Z]`` from ``z`` ``[B, Z]`` and ``action`` ``[B, A]`` (None for V critics,
        whose model predicts the next latent under the acting policy)."""
        return self.dynamics(self._model_input(z, action))

    def predict_reward(self, z: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted reward ``[B, G]`` (action None for V critics; read out of the logits for two-hot heads)."""
        return self.readout(self.reward(self._model_input(z, action)))

    def _model_input(self, z: torch.Tensor, action: torch.Tensor | None) -> torch.Tensor:
        if self.takes_action != (action is not None):
            raise ValueError(
                f"{'a Q' if self.takes_action else 'a V'} world-model critic's model "
                f"{'needs' if self.takes_action else 'takes no'} action"
            )
        return z if action is None else torch.cat([z, action], dim=-1)

    @torch.no_grad()
    def td_targets(
        self, next_obs: torch.Tensor, next_action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor
    ) -> torch.Tensor:
        """``r + discount * min_2 Q_target(h(o'), a')``: next obs ``[..., D]``, next action ``[..., A]``,
        reward ``[..., G]``, discount ``[...]`` -> ``[..., G]``. ``h`` is the target encoder or, with
        ``td_encoder=online``, the online one (TD-MPC2's target)."""
        lead = next_obs.shape[:-1]
        target = self.target_critic()
        encoder = self if self.cfg.td_encoder == "online" else target
        z = encoder._encode(next_obs.reshape(-1, next_obs.shape[-1]))
        q = target.head_estimates(z, next_action.reshape(-1, next_action.shape[-1]), self.random_heads())
        boot = reduce_members(q, "min").reshape(*lead, -1)
        return reward + discount.unsqueeze(-1) * boot

    def random_heads(self) -> list[int]:
        """Indices of ``subset`` (2) distinct Q heads drawn uniformly (TD-MPC2's target and prior heads)."""
        return torch.randperm(self.cfg.num_q)[: self.subset].tolist()

    def head_estimates(self, z: torch.Tensor, action: torch.Tensor, heads: list[int]) -> torch.Tensor:
        """``[len(heads), B, G]`` estimates of the chosen Q heads only, for latents ``[B, Z]`` and actions ``[B, A]``
        (cheaper than :meth:`estimates` when only a subset is reduced)."""
        return self.readout(self._q_outputs(z, self.check_action(action), heads))

    def rollout_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        td_targets: torch.Tensor,
        alive: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Joint consistency + reward + TD loss over a ``T``-step latent rollout (Q kind).

        Args:
            obs: ``[T + 1, B, D]`` true observations ``o_0 .. o_T`` (``o_{t+1}`` the true next obs of step ``t``).
            actions: ``[T, B, A]``; rewards: ``[T, B, G]``; td_targets: ``[T, B, G]`` (see :meth:`td_targets`).
            alive: ``[T, B]`` bool, False for steps after the episode ended inside the window.
        """
        if not self.takes_action:
            raise ValueError("rollout_loss trains Q heads; a V world-model critic uses latent_loss")
        T = actions.shape[0]
        if obs.shape[0] != T + 1 or rewards.shape[0] != T or td_targets.shape[0] != T:
            raise ValueError(
                f"rollout_loss needs obs [T+1, B, D] and actions/rewards/td_targets [T, B, ...]; got obs "
                f"{list(obs.shape)}, actions {list(actions.shape)}, rewards {list(rewards.shape)}, "
                f"td_targets {list(td_targets.shape)}"
            )
        mask = torch.ones(actions.shape[:2], device=obs.device) if alive is None else alive.float()
        with torch.no_grad():
            next_z = self._encode(obs[1:].flatten(0, 1)).reshape(T, obs.shape[1], -1)
        z = self._encode(obs[0])
        consistency = reward_loss = value_loss = torch.zeros((), device=obs.device)
        weight_sum = 0.0
        for t in range(T):
            w = self.cfg.rho**t
            weight_sum += w
            m = mask[t]
            denom = m.sum().clamp(min=1.0)
            reward_err = self.regression_error(self.reward(self._model_input(z, actions[t])), rewards[t])
            q = self._q_outputs(z, actions[t], range(self.cfg.num_q))  # [E, B, G * K]
            value_err = self.regression_error(q, td_targets[t].unsqueeze(0)).mean(0)
            z = self.next(z, actions[t])
            latent_err = (z - next_z[t]).pow(2).mean(-1)
            consistency = consistency + w * (latent_err * m).sum() / denom
            reward_loss = reward_loss + w * (reward_err * m).sum() / denom
            value_loss = value_loss + w * (value_err * m).sum() / denom
        consistency, reward_loss, value_loss = (x / weight_sum for x in (consistency, reward_loss, value_loss))
        c = self.cfg
        loss = c.consistency_coef * consistency + c.reward_coef * reward_loss + c.value_coef * value_loss
        return loss, {
            "consistency_loss": consistency.detach(),
            "reward_loss": reward_loss.detach(),
            "critic_loss": value_loss.detach(),
        }

    def latent_loss(
        self, obs: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor, alive: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """V kind's auxiliary loss: predict ``sg(h(o'))`` and ``r`` from ``h(o)`` (under the acting policy).

        Args: obs, next_obs ``[B, D]`` (``next_obs`` the true successor, ``final_obs`` where done);
        reward ``[B, G]``; alive ``[B]`` bool (False to leave a sample out, e.g. after termination).
        """
        if self.takes_action:
            raise ValueError("latent_loss is the V critic's auxiliary loss; Q world-model critics use rollout_loss")
        z = self._encode(obs)
        with torch.no_grad():
            target = self._encode(next_obs)
        m = torch.ones(obs.shape[0], device=obs.device) if alive is None else alive.float()
        latent = ((self.next(z) - target).pow(2).mean(-1) * m).sum() / m.sum().clamp(min=1.0)
        rew = (self.regression_error(self.reward(z), reward) * m).sum() / m.sum().clamp(min=1.0)
        loss = self.cfg.consistency_coef * latent + self.cfg.reward_coef * rew
        return loss, {"consistency_loss": latent.detach(), "reward_loss": rew.detach()}

    def aux_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's auxiliary-loss hook (V kind): :meth:`latent_loss` on a mini-batch with ``critic_obs``,
        ``next_critic_obs`` ``[B, D]``, ``rewards`` ``[B, G]`` and ``next_valid`` ``[B]`` (PPO's
        ``RolloutStorage.successors``); PPO adds it to its value loss."""
        loss, metrics = self.latent_loss(
            batch["critic_obs"], batch["next_critic_obs"], batch["rewards"], batch["next_valid"])
        return self.cfg.aux_coef * loss, metrics
