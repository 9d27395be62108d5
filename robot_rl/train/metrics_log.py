"""Metric sinks: TensorBoard (default), Weights & Biases (optional), and a JSON-lines file.

Metrics arrive as floats or detached 0-d tensors (agents keep them on the device during the updates);
:func:`scalars` turns them into floats here, once per log call, with one device-to-host copy per device.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

BACKENDS = ("tensorboard", "wandb")


def scalars(metrics: Mapping[str, float | torch.Tensor]) -> dict[str, float]:
    """``metrics`` with its 0-d tensors as Python floats (stacked per device and copied once), same order."""
    out: dict[str, float] = {k: v for k, v in metrics.items() if not isinstance(v, torch.Tensor)}
    by_device: dict[torch.device, list[str]] = {}
    for k, v in metrics.items():
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append(k)
    for keys in by_device.values():
        values = torch.stack([metrics[k].detach().reshape(()).double() for k in keys]).tolist()
        out.update(zip(keys, values, strict=True))
    return {k: out[k] for k in metrics}


class MetricLogger:
    """Write scalar metrics to ``run_dir/metrics.jsonl`` and to the configured backends.

    ``enabled=False`` (the ranks other than 0 of a data-parallel run) writes nothing anywhere.
    """

    def __init__(self, run_dir: Path, backends: list[str], project: str = "robot_rl",
                 config: dict[str, Any] | None = None, enabled: bool = True) -> None:
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"logger.backends has unknown {unknown}; use any of {list(BACKENDS)}")
        self.jsonl = open(Path(run_dir) / "metrics.jsonl", "a") if enabled else None
        self.tb = None
        self.wandb = None
        if not enabled:
            return
        if "tensorboard" in backends:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        if "wandb" in backends:
            try:
                import wandb
            except ImportError:
                raise ImportError(
                    "logger.backends includes 'wandb' but wandb is not installed: `pip install wandb`, "
                    "or use logger=tensorboard"
                ) from None
            self.wandb = wandb.init(project=project, dir=str(run_dir), config=config, resume="allow")

    def log(self, metrics: Mapping[str, float | torch.Tensor], step: int) -> None:
        """Record ``metrics`` (floats or 0-d tensors, see :func:`scalars`) at environment step ``step``."""
        if self.jsonl is None:
            return
        metrics = scalars(metrics)
        self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self.jsonl.flush()
        if self.tb is not None:
            for k, v in metrics.items():
                self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def close(self) -> None:
        """Flush and close every sink."""
        if self.jsonl is not None:
            self.jsonl.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
