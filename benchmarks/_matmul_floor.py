"""The matrix products one SAC update cannot avoid, and how long they alone take on this machine.

A lower bound on an update's wall: whatever a library does around them (autograd, optimisers, elementwise
ops, dispatch), every SAC implementation with the same networks and batch multiplies these matrices. Timing
them with one ``torch.mm`` each at float32 and bfloat16 gives the update's arithmetic floor per precision;
:mod:`sac_vs_sb3` prints it beside the measured walls, so an unmet wall target shows whether it is bounded by
the core's arithmetic or by overhead.

A product is ``(m, k, n)``: ``[m, k] @ [k, n]``, ``m * k * n`` multiply-adds. A linear layer ``in -> out`` on a
batch of ``B`` costs ``(B, in, out)`` forward, ``(out, B, in)`` for its weight gradient and ``(B, out, in)`` for
its input gradient (only where the input needs one).
"""

from __future__ import annotations

import itertools
import time

import torch

Product = tuple[int, int, int]


def forward(dims: list[int], batch: int) -> list[Product]:
    """The products of an MLP with layer widths ``dims`` (input first) on ``batch`` rows."""
    return [(batch, a, b) for a, b in itertools.pairwise(dims)]


def backward(dims: list[int], batch: int, weights: bool, input_grad: bool) -> list[Product]:
    """The backward products of that MLP: weight gradients of every layer (``weights``) and input gradients of
    every layer but the first, and of the first too when ``input_grad`` (its input needs a gradient)."""
    layers = list(itertools.pairwise(dims))
    out = [(b, batch, a) for a, b in layers] if weights else []
    return out + [(batch, b, a) for i, (a, b) in enumerate(layers) if i > 0 or input_grad]


def sac_update_products(obs_dim: int, action_dim: int, hidden: list[int], members: int,
                        batch: int) -> list[Product]:
    """Every product of one SAC update (sbx's and ours: gradients only for what is trained).

    Critic target: actor forward on the next observations, ``members`` target critics forward. Critic step:
    ``members`` critics forward and backward (weight gradients; no gradient into the batch's observations and
    actions). Actor step: actor forward, ``members`` critics forward on its action, backward through the critics
    to the action (input gradients only: the critics are not trained here) and through the actor (weights)."""
    actor = [obs_dim, *hidden, 2 * action_dim]
    critic = [obs_dim + action_dim, *hidden, 1]
    target = forward(actor, batch) + members * forward(critic, batch)
    critic_step = members * (forward(critic, batch) + backward(critic, batch, weights=True, input_grad=False))
    actor_step = (forward(actor, batch) + members * forward(critic, batch)
                  + members * backward(critic, batch, weights=False, input_grad=True)
                  + backward(actor, batch, weights=True, input_grad=False))
    return target + critic_step + actor_step


def multiply_adds(products: list[Product]) -> int:
    """Total multiply-adds of ``products``."""
    return sum(m * k * n for m, k, n in products)


def floor_ms(products: list[Product], dtype: torch.dtype, repeats: int = 30) -> float:
    """Milliseconds to run ``products`` once, one ``torch.mm`` each at ``dtype`` (current torch threads): the
    fastest of ``repeats`` passes after two warm-up passes (operands made once, outside the clock)."""
    operands = [(torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)) for m, k, n in products]
    best = float("inf")
    for i in range(repeats + 2):
        start = time.perf_counter()
        for a, b in operands:
            torch.mm(a, b)
        if i >= 2:
            best = min(best, time.perf_counter() - start)
    return 1000 * best
