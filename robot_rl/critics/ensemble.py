"""Ensembles of Q critics as stacked parameters, evaluated as batched matmuls (one call for ``E`` nets).

Config key ``critic=ensemble``. With ``num_members=2`` it is the clipped double Q of TD3/SAC
(Fujimoto et al. 2018; agents reduce the target with ``min``); with ``num_members=10`` and
``subset=2`` it is REDQ (Chen et al., "Randomized Ensembled Double Q-Learning", ICLR 2021:
targets use the minimum over a random subset, the actor the mean of all members).

Parameters of the ``E`` member MLPs are stacked along a leading dimension (TD-MPC2's
``layers.Ensemble``), so the target update of the whole ensemble is one ``torch._foreach_lerp_``
over a handful of stacked tensors (:meth:`Critic.update_target`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import stack_module_state

from robot_rl.config.checks import check
from robot_rl.critics.base import Critic, CriticSpec
from robot_rl.critics.registry import register_critic
from robot_rl.models.mlp import ACTIVATIONS, mlp
from robot_rl.models.mlp import activation as activation_module


def critic_input(obs: torch.Tensor, action: torch.Tensor | None) -> torch.Tensor:
    """Concatenate ``obs [B, D]`` with the action ``[B, A]`` -> ``[B, D + A]`` (None: ``obs``)."""
    return obs if action is None else torch.cat([obs, action.flatten(1)], dim=-1)


def input_dim(spec: CriticSpec) -> int:
    """Size of :func:`critic_input`'s output for ``spec``."""
    return spec.obs_dim + spec.action_dim


class StackedMLP(nn.Module):
    """``E`` independently initialised MLPs evaluated together: ``[B, in] -> [E, B, out]``.

    Layer ``i`` holds ``weights[i]`` ``[E, in_i, out_i]`` and ``biases[i]`` ``[E, 1, out_i]``: the
    members' ``nn.Linear`` parameters stacked (``torch.func.stack_module_state``), so each layer
    of all members is one batched matmul (``torch.baddbmm``). This is what ``torch.vmap`` of the
    member MLP lowers to; calling ``baddbmm`` directly skips vmap's dispatch, which measured
    20-35% slower per forward + backward on CPU at ``E = 2``, batch 256 (see docs/agents.md).
    """

    def __init__(
        self,
        num_members: int,
        in_dim: int,
        hidden_dims: list[int],
        out_dim: int,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if num_members < 1:
            raise ValueError(f"num_members must be >= 1, got {num_members}")
        members = [mlp(in_dim, hidden_dims, out_dim, activation) for _ in range(num_members)]
        params, _ = stack_module_state(members)
        linears = [i for i, m in enumerate(members[0]) if isinstance(m, nn.Linear)]
        self.weights = nn.ParameterList(
            [nn.Parameter(params[f"{i}.weight"].transpose(1, 2).contiguous()) for i in linears]
        )
        self.biases = nn.ParameterList([nn.Parameter(params[f"{i}.bias"].unsqueeze(1)) for i in linears])
        self.act = activation_module(activation)
        self.num_members = num_members

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """All members on the same input: ``x [B, in]`` -> ``[E, B, out]``."""
        h = x.unsqueeze(0).expand(self.num_members, -1, -1)
        *hidden, (w_out, b_out) = zip(self.weights, self.biases, strict=True)
        for w, b in hidden:
            h = self.act(torch.baddbmm(b, h, w))
        return fp32_baddbmm(b_out, h, w_out)


def fp32_baddbmm(bias: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``bias + x @ weight`` in float32 even inside a bf16 ``torch.autocast`` region.

    Output layers (values, logits, quantiles, action means) stay in float32 under ``agent.amp=bf16``:
    a bf16 Q of 500 is only resolved to 2, coarser than the TD errors being regressed. The layer
    is tiny (``[in, out]`` with small ``out``), so this costs nothing measurable.
    ``bias [E, 1, out]``, ``x [E, B, in]``, ``weight [E, in, out]`` -> ``[E, B, out]``.
    """
    if torch.is_autocast_enabled(x.device.type):
        with torch.autocast(x.device.type, enabled=False):
            return torch.baddbmm(bias, x.float(), weight)
    return torch.baddbmm(bias, x, weight)


@dataclass
class EnsembleCriticConfig:
    """``E`` MLP Q critics with stacked parameters.

    Attributes:
        num_members: ``E`` (2 = clipped double Q, 10 = REDQ).
        subset: members in the random-subset minimum (REDQ's ``M``); agents read it for
            ``reduce="random_min"`` targets.
        hidden_dims: hidden layer widths of every member.
        activation: ``relu``, ``elu``, ``tanh``, ``silu`` or ``gelu``.
    """

    num_members: int = 2
    subset: int = 2
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"

    def __post_init__(self) -> None:
        check(self, "critic", at_least_1=("num_members", "subset", "hidden_dims"),
              choices={"activation": ACTIVATIONS})


@register_critic("ensemble", EnsembleCriticConfig)
class EnsembleCritic(Critic):
    """``E`` Q networks in one vmapped call; estimates ``[E, B, G]``."""

    kinds = frozenset({"Q"})

    def __init__(self, spec: CriticSpec, cfg: EnsembleCriticConfig) -> None:
        super().__init__(spec)
        if not 1 <= cfg.subset <= cfg.num_members:
            raise ValueError(
                f"critic.subset must be in [1, num_members={cfg.num_members}], got {cfg.subset}"
            )
        self.subset = cfg.subset
        self.members = StackedMLP(
            cfg.num_members, input_dim(spec), list(cfg.hidden_dims), spec.num_values, cfg.activation
        )

    def estimates(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """``[E, B, G]`` Q values of ``obs [B, D]`` and ``action [B, A]`` (or ``[B, H, A]``)."""
        return self.members(critic_input(obs, self.check_action(action)))
