"""Parameters packed into one flat buffer, so that zeroing, clipping and the optimiser step are one call each.

PPO's [64, 64] networks have 6-7 parameter tensors each; on CPU, zeroing their gradients, clipping them and
torch's fused Adam step cost ~330 us of per-tensor dispatch per mini-batch step of ~1.3 ms. :class:`FlatParameters`
makes every parameter a view of one buffer and every gradient a view of another: backward accumulates into those
views in place, an optimiser over ``[pack.flat]`` steps them all at once, and the three calls cost ~180 us
(docs/training.md "Where the time goes").
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ALIGN_BYTES = 64
"""Each packed parameter starts at a multiple of this many bytes of the buffer (zeros in between), as torch's CPU
allocator aligns a tensor of its own, so vectorised kernels meet it as they would the unpacked tensor."""


class FlatParameters:
    """``params`` packed into :attr:`flat` ``[P]`` (their values) and ``flat.grad`` ``[P]`` (their gradients); ``P``
    counts the padding that aligns each parameter (:data:`ALIGN_BYTES`), zero in both buffers and never updated.

    Each parameter's ``.data`` becomes a view of :attr:`flat` and its ``.grad`` a view of ``flat.grad``, in the
    order given; the modules that own them keep working unchanged (forward, ``state_dict``, ``load_state_dict``,
    ``deepcopy``). Optimise ``[pack.flat]`` instead of the parameters. The arithmetic is unchanged: Adam is
    elementwise and :meth:`clip_grad_norm_` computes the same joint norm. The rounding is not bit for bit: the norm
    sums in another order, and torch's fused Adam kernel rounds a tensor's last ``len % 16`` elements in a scalar
    loop and the rest in a vector loop, which differ in the last bit (1 ulp, measured), and packing moves which
    elements fall in each; so a seed's run drifts from the unpacked one after a few updates (both deterministic).

    A parameter's ``.grad`` must stay the view: never ``zero_grad(set_to_none=True)`` these parameters (a new
    gradient tensor would not reach ``flat.grad``); use :meth:`zero_grad`. :meth:`check` raises if it happened.
    """

    def __init__(self, params: list[nn.Parameter]) -> None:
        if not params:
            raise ValueError("FlatParameters needs at least one parameter")
        kinds = {(p.dtype, p.device) for p in params}
        if len(kinds) != 1:
            raise ValueError(f"FlatParameters packs parameters of one dtype and device, got {sorted(map(str, kinds))}")
        self.params = list(params)
        self.sizes = [p.numel() for p in params]
        align = ALIGN_BYTES // params[0].element_size()
        self.offsets = [0]
        for size in self.sizes[:-1]:
            self.offsets.append(self.offsets[-1] + -(-size // align) * align)
        self.flat = nn.Parameter(torch.zeros(self.offsets[-1] + self.sizes[-1], dtype=params[0].dtype,
                                             device=params[0].device))
        self.flat.grad = torch.zeros_like(self.flat)
        for p, offset, size in zip(params, self.offsets, self.sizes, strict=True):
            self.flat.data[offset:offset + size] = p.detach().reshape(-1)
            p.data = self.flat.data[offset:offset + size].view_as(p)
            p.grad = self.flat.grad[offset:offset + size].view_as(p)
        self._grads = [p.grad for p in params]

    def zero_grad(self) -> None:
        """Zero every packed gradient (one fill of ``flat.grad``)."""
        self.flat.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradients so that their joint 2-norm is at most ``max_norm`` (times ``min(1, max_norm / (norm +
        1e-6))``, as ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping (a 0-d tensor). The norm is
        that of ``flat.grad`` (the padding is zero): one reduction instead of torch's norm of per-tensor norms, equal up
        to float rounding."""
        total = torch.linalg.vector_norm(self.flat.grad)
        self.flat.grad.mul_((max_norm / (total + 1e-6)).clamp(max=1.0))
        return total

    def check(self) -> None:
        """Raise ``RuntimeError`` if a packed parameter's value or gradient is no longer a view of the buffers (its
        ``.data`` or ``.grad`` replaced): its updates or gradients would be lost without a sound."""
        for i, (p, grad, offset) in enumerate(zip(self.params, self._grads, self.offsets, strict=True)):
            if p.grad is not grad or p.data_ptr() != self.flat.data_ptr() + offset * p.element_size():
                raise RuntimeError(f"packed parameter {i} {tuple(p.shape)} no longer views the flat buffers (its "
                                   ".grad set to None or replaced, or its .data reassigned); zero its gradient with "
                                   "FlatParameters.zero_grad(), never optimizer.zero_grad(set_to_none=True)")

    def pack_optimizer_state(self, state: dict[str, Any], group: int) -> dict[str, Any]:
        """An optimiser ``state`` (``optimizer.state_dict()``, not modified) with param group ``group`` converted from
        one entry per parameter, as saved before packing, into one entry for :attr:`flat`; a packed group comes back
        as it was. Per-element buffers (Adam's ``exp_avg``, ``exp_avg_sq``) are laid out as the parameters are (zeros
        in the padding), 0-d ones (``step``) must agree. The parameter indices are renumbered ``0, 1, ...`` in group
        order."""
        groups = [dict(g) for g in state["param_groups"]]
        per_param = dict(state["state"])
        ids = groups[group]["params"]
        saved = per_param.get(ids[0], {}).values()
        if len(ids) == 1 and all(v.dim() == 0 or v.shape == self.flat.shape for v in saved):
            return {"state": per_param, "param_groups": groups}
        if len(ids) != len(self.params):
            raise ValueError(f"optimiser param group {group} holds {len(ids)} parameters, the packed one "
                             f"{len(self.params)}: a checkpoint of another network")
        entries = [per_param.pop(i, {}) for i in ids]
        packed: dict[str, Any] = {}
        for key in entries[0]:
            values = [e[key] for e in entries]
            if values[0].dim() == 0:
                if not all(torch.equal(v, values[0]) for v in values):
                    raise ValueError(f"optimiser state {key!r} differs between the parameters of group {group}")
                packed[key] = values[0].clone()
            elif [v.numel() for v in values] == self.sizes:
                packed[key] = torch.zeros(self.flat.shape, dtype=values[0].dtype, device=values[0].device)
                for v, offset, size in zip(values, self.offsets, self.sizes, strict=True):
                    packed[key][offset:offset + size] = v.reshape(-1)
            else:
                raise ValueError(f"optimiser state {key!r} of group {group} does not match the parameters' sizes")
        if packed:
            per_param[ids[0]] = packed
        groups[group]["params"] = [ids[0]]
        renumber = {old: new for new, old in enumerate(i for g in groups for i in g["params"])}
        for g in groups:
            g["params"] = [renumber[i] for i in g["params"]]
        return {"state": {renumber[i]: v for i, v in per_param.items()}, "param_groups": groups}
