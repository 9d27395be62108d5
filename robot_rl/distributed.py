"""Multi-process data-parallel training under torchrun (one process per rank, every rank a full learner).

Each rank runs its own envs and its own copy of the agent; the copies stay identical because

- parameters and buffers are broadcast from rank 0 at start (:func:`broadcast_modules`);
- every optimiser step averages the gradients over ranks first (:func:`sync_gradients`, a global
  optimiser step pre-hook: one flattened ``all_reduce`` per step, no change in the agents);
- observation (and reward) normalisers fold the pooled moments of all ranks' batches
  (:func:`pooled_moments`, called by :class:`robot_rl.models.EmpiricalNormalizer`);
- PPO's adaptive learning rate follows the KL averaged over ranks (:func:`all_mean`).

The process group comes from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``); the backend follows the device: ``gloo`` on CPU, ``nccl`` on CUDA.
Without torchrun (or with one process) every function here is the single-process identity, so
callers need no branches. This module imports only torch: agents, models and runners all use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

RANK_SEED_STRIDE = 1_000_003
"""Rank ``r`` seeds its envs and torch with ``seed + r * RANK_SEED_STRIDE`` (wrapped to 31 bits)."""
_SEED_WRAP = 2**31 - 20_001  # robot_rl.config.schema.SEED_MAX + 1: eval seeds (+10_000) stay in int32


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher) as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def under_launcher() -> bool:
    """Whether torchrun started this process (even as the only rank): it sets ``LOCAL_RANK``."""
    return "LOCAL_RANK" in os.environ


def active() -> bool:
    """Whether a process group of more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of ranks (1 without a process group)."""
    return dist.get_world_size() if active() else 1


def rank() -> int:
    """This process's global rank (0 without a process group)."""
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    """True on rank 0, the only rank that writes logs, checkpoints, evaluations and artifacts."""
    return rank() == 0


def backend_for(device: str) -> str:
    """``nccl`` for a CUDA device, ``gloo`` otherwise (CPU)."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


_hook: list[torch.utils.hooks.RemovableHandle] = []  # the gradient hook of :func:`init`, removed by :func:`shutdown`


def init(device: str) -> str:
    """Join the process group described by torchrun's environment and average gradients from now on
    (:func:`sync_gradients`); returns this rank's device.

    A CUDA ``device`` (``cuda`` or ``cuda:<i>``) becomes ``cuda:<LOCAL_RANK>``: each rank owns one GPU of
    its node. Does nothing (returns ``device``) when not launched as several ranks or already joined.
    """
    if not launched():
        return device
    if str(device).startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device), init_method="env://")
        _hook.append(sync_gradients())
    return device


def shutdown() -> None:
    """Stop averaging gradients and leave the process group (if one was joined)."""
    while _hook:
        _hook.pop().remove()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int) -> int:
    """This rank's seed: ``seed`` on rank 0, ``seed + rank * RANK_SEED_STRIDE`` (mod 2^31 - 20001) on others."""
    return (seed + rank() * RANK_SEED_STRIDE) % _SEED_WRAP


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if active():
        dist.barrier()


def broadcast_object(obj: object) -> object:
    """Rank 0's ``obj`` on every rank (a picklable value: run directory names, not model state)."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@torch.no_grad()
def broadcast_modules(modules: Iterable[nn.Module]) -> None:
    """Overwrite every parameter and buffer of ``modules`` with rank 0's values (in place)."""
    if not active():
        return
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)


@torch.no_grad()
def average_gradients(params: Iterable[torch.Tensor]) -> None:
    """Replace the ``.grad`` of each parameter by its mean over ranks: one flat ``all_reduce`` per dtype.

    Parameters without a gradient are skipped; every rank must hold gradients for the same ones (the
    same code path runs on every rank).
    """
    if not active():
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
    n = dist.get_world_size()
    for grads in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= n
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def _average_before_step(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
    average_gradients(p for group in optimizer.param_groups for p in group["params"])


def sync_gradients() -> torch.utils.hooks.RemovableHandle:
    """Make every ``optimizer.step()`` of this process average its parameters' gradients over ranks first.

    A global pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``), so agents need no
    change; an agent that clips gradients clips its own rank's before they are averaged (rsl_rl averages
    before clipping). Returns the handle that removes it.
    """
    return register_optimizer_step_pre_hook(_average_before_step)


@torch.no_grad()
def all_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean of a tensor over ranks (a new tensor; ``value`` itself in one process)."""
    if not active():
        return value
    out = value.detach().clone()
    dist.all_reduce(out)
    return out / dist.get_world_size()


@torch.no_grad()
def pooled_moments(x: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(n, mean [D], var [D])`` of the union of every rank's batch ``x`` ``[B_r, D]`` (biased variance).

    One ``all_reduce`` of ``[n, n * mean, n * (var + mean^2)]`` in float64; in one process, ``x``'s own
    moments. With ``n == 0`` the mean and variance are zeros.
    """
    n = x.shape[0]
    if not active():
        if n == 0:
            return 0, x.new_zeros(x.shape[1:]), x.new_zeros(x.shape[1:])
        mean = x.mean(0)  # two passes over contiguous rows: 8-10x faster on CPU than x.var(0)'s column walk
        return n, mean, (x - mean).square().mean(0)
    x64 = x.double()
    sums = torch.cat([x64.new_tensor([float(n)]), x64.sum(0), x64.pow(2).sum(0)])
    dist.all_reduce(sums)
    total = int(sums[0].item())
    if total == 0:
        return 0, x.new_zeros(x.shape[1:]), x.new_zeros(x.shape[1:])
    dim = x.shape[1]
    mean = sums[1:1 + dim] / total
    var = (sums[1 + dim:] / total - mean.pow(2)).clamp_min(0.0)
    return total, mean.to(x.dtype), var.to(x.dtype)
