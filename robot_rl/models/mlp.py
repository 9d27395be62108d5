"""Multi-layer perceptron builder shared by actors and critics."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


def activation(name: str) -> nn.Module:
    """The activation module called ``name`` (one of :data:`ACTIVATIONS`)."""
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; use one of {sorted(ACTIVATIONS)}") from None


def mlp(in_dim: int, hidden_dims: Sequence[int], out_dim: int, act: str = "elu") -> nn.Sequential:
    """``[B, in_dim] -> [B, out_dim]``: Linear + activation per hidden layer, linear output."""
    if in_dim < 1 or out_dim < 1 or any(h < 1 for h in hidden_dims):
        raise ValueError(
            f"mlp sizes must be positive: in={in_dim}, hidden={list(hidden_dims)}, out={out_dim}"
        )
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden_dims:
        layers += [nn.Linear(last, h), activation(act)]
        last = h
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def fp32_head(net: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Run ``net`` ``[B, in] -> [B, out]`` with its last layer in float32, even under a bf16 autocast.

    The hidden layers follow the ambient autocast; the output layer (action mean, log-std, value)
    is tiny and precision-sensitive, so it never runs in bfloat16.
    """
    *body, head = net
    for layer in body:
        x = layer(x)
    if torch.is_autocast_enabled(x.device.type):
        with torch.autocast(x.device.type, enabled=False):
            return head(x.float())
    return head(x)
