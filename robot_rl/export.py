"""Export a trained actor as a policy artifact (DESIGN.md, contract 3; the torch side).

Typical use by a runner after training::

    head = PolicyHead(actor_net, meta, obs_mean=norm.mean, obs_std=norm.std)
    export_policy(head, meta, "outputs/run/policy")

The artifact is read back by :mod:`robot_rl.deploy` with numpy + onnxruntime only.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robot_rl.deploy.actions import action_spec
from robot_rl.deploy.artifact import (
    MANIFEST_FILE,
    META_FILE,
    ONNX_FILE,
    TORCHSCRIPT_FILE,
    ArtifactError,
    ChunkExecution,
    ObservationTerm,
    PolicyMeta,
    save_meta,
    sha256_file,
    write_atomic,
    write_manifest,
)

FORMATS = ("onnx", "torchscript")


class PolicyHead(nn.Module):
    """Wrap a raw actor into the artifact's I/O: observation normalisation in, joint targets out.

    ``action = offset + scale * clip(net((obs - mean) / std), clip_low, clip_high)``.

    Args:
        net: maps normalised obs ``[B, D]`` to the raw (deterministic) action ``[B, H*A]``.
        meta: supplies ``D``, ``H``, ``A`` and the action scale/offset/clip.
        obs_mean: ``[D]`` normaliser mean (default 0).
        obs_std: ``[D]`` normaliser std (default 1); clamped to >= 1e-8.
    """

    def __init__(
        self,
        net: nn.Module,
        meta: PolicyMeta,
        obs_mean: torch.Tensor | None = None,
        obs_std: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        D, H = meta.observation_dim, meta.chunk_length
        self.net = net
        mean = torch.zeros(D) if obs_mean is None else obs_mean.detach().float().reshape(D).cpu()
        std = torch.ones(D) if obs_std is None else obs_std.detach().float().reshape(D).cpu()
        self.register_buffer("obs_mean", mean.clone())
        self.register_buffer("obs_std", std.clamp_min(1e-8).clone())
        self.register_buffer("scale", torch.tensor(meta.action.scale, dtype=torch.float32).repeat(H))
        self.register_buffer("offset", torch.tensor(meta.action.offset, dtype=torch.float32).repeat(H))
        self.clip_low = float(meta.action.clip_low)
        self.clip_high = float(meta.action.clip_high)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [B, D]`` (env policy observation) -> joint targets ``[B, H*A]``."""
        raw = self.net((obs - self.obs_mean) / self.obs_std)
        # torch twin of robot_rl.deploy.actions.to_targets (it runs in the graph); tests/test_action_maps.py
        return self.offset + self.scale * raw.clamp(self.clip_low, self.clip_high)


def make_meta(
    robot: str,
    joint_names: Sequence[str],
    default_joint_pos: Sequence[float],
    observation_layout: Sequence[tuple[str, int, float]],
    action_scale: float | Sequence[float],
    control_hz: float,
    action_type: str = "joint_position_delta_default",
    chunk_length: int = 1,
    chunk_execution: ChunkExecution | None = None,
    task: str = "",
    training: dict | None = None,
    config: dict | None = None,
    joint_lower: Sequence[float] | None = None,
    joint_upper: Sequence[float] | None = None,
) -> PolicyMeta:
    """Build a validated :class:`PolicyMeta` from what an env and its ``robot.yaml`` know.

    ``observation_layout`` is ``env.observation_layout["policy"]``: ``(term, size, scale)`` in order.
    The action mapping is :func:`robot_rl.deploy.actions.action_spec` of ``action_type``:
    ``joint_position`` needs ``joint_lower``/``joint_upper`` and ignores ``action_scale``.
    ``chunk_execution`` (None): open loop of the whole chunk of ``chunk_length`` actions.
    """
    default = [float(x) for x in default_joint_pos]
    return PolicyMeta(
        robot=robot,
        joint_names=list(joint_names),
        default_joint_pos=default,
        observation=[ObservationTerm(str(n), int(s), float(c)) for n, s, c in observation_layout],
        action=action_spec(action_type, action_scale, default, joint_lower, joint_upper),
        control_hz=float(control_hz),
        chunk_length=int(chunk_length),
        chunk_execution=chunk_execution,
        task=task,
        training=dict(training or {}),
        config=dict(config or {}),
    ).validate()


def onnx_bytes(module: nn.Module, examples: tuple[torch.Tensor, ...], input_names: Sequence[str]) -> bytes:
    """The ONNX graph (opset 17, traced) of ``module(*examples)`` with inputs ``input_names`` and output ``action``;
    dimension 0 of every input and of the output is the batch."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            examples,
            buffer,
            input_names=list(input_names),
            output_names=["action"],
            dynamic_axes={name: {0: "batch"} for name in [*input_names, "action"]},
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def _torchscript_bytes(module: nn.Module, example: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(module, example)
    torch.jit.save(traced, buffer)
    return buffer.getvalue()


def check_outputs(name: str, expected: np.ndarray, got: np.ndarray, atol: float) -> None:
    """ArtifactError unless graph ``name``'s ``got`` equals torch's ``expected`` to ``atol`` (NaN where it is)."""
    if got.shape != expected.shape:
        raise ArtifactError(f"{name} returns shape {got.shape}, torch returns {expected.shape}.")
    nan_expected, nan_got = np.isnan(expected), np.isnan(got)
    if not np.array_equal(nan_expected, nan_got):
        raise ArtifactError(f"{name} returns NaN where the torch actor does not (or the reverse).")
    err = float(np.max(np.abs(np.where(nan_expected, 0.0, got - expected)), initial=0.0))
    if not err <= atol:
        raise ArtifactError(f"{name} differs from the torch actor by {err:.3g} > atol {atol:g}.")


def export_policy(
    actor: nn.Module,
    meta: PolicyMeta,
    out_dir: str | Path,
    formats: Sequence[str] = FORMATS,
    atol: float = 1e-5,
    seed: int = 0,
) -> Path:
    """Write ``policy.onnx``, ``policy.pt``, ``policy.yaml`` and ``manifest.json`` into ``out_dir``, atomically.

    ``manifest.json`` and ``policy.yaml`` are removed first; policy.yaml is written after the graphs and
    ``manifest.json`` (the sha256 of every file, policy.yaml included) last, so a directory holding a
    manifest is complete. An actor with a NaN/Inf weight is refused (ArtifactError naming the run).
    Every exported graph is run on a random batch and compared with ``actor`` to ``atol`` (NaN
    outputs must match position by position: the deploy safety layer, not export, guards them).

    Args:
        actor: maps raw obs ``[B, D]`` to joint targets ``[B, H*A]`` in robot units (normalisation
            inside), e.g. a :class:`PolicyHead`. Copied to CPU; the original is untouched.
        meta: the artifact description; ``files`` is filled in here.
        out_dir: created if missing.
        formats: any of ``("onnx", "torchscript")``; ``onnx`` is required by the deploy runtime.

    Returns:
        ``out_dir`` as a :class:`Path`.
    """
    meta.validate()
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"formats {list(formats)} must be a non-empty subset of {FORMATS}.")
    module = copy.deepcopy(actor).cpu().eval()
    check_finite_weights(module, Path(out_dir))
    D, HA = meta.observation_dim, meta.chunk_length * meta.action_dim
    example = torch.randn(4, D, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = module(example)
    if tuple(expected.shape) != (4, HA):
        raise ArtifactError(
            f"actor maps obs [4, {D}] to {tuple(expected.shape)}, expected [4, {HA}] "
            f"(chunk_length {meta.chunk_length} x {meta.action_dim} joints)."
        )
    expected_np = expected.numpy()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    (out / META_FILE).unlink(missing_ok=True)
    files = {}
    if "onnx" in formats:
        import onnxruntime as ort

        data = onnx_bytes(module, (example,), ["obs"])
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        check_outputs("policy.onnx", expected_np, session.run(None, {"obs": example.numpy()})[0], atol)
        write_atomic(out / ONNX_FILE, data)
        files[ONNX_FILE] = sha256_file(out / ONNX_FILE)
    if "torchscript" in formats:
        data = _torchscript_bytes(module, example)
        loaded = torch.jit.load(io.BytesIO(data))
        with torch.no_grad():
            check_outputs("policy.pt", expected_np, loaded(example).numpy(), atol)
        write_atomic(out / TORCHSCRIPT_FILE, data)
        files[TORCHSCRIPT_FILE] = sha256_file(out / TORCHSCRIPT_FILE)
    save_meta(dataclasses.replace(meta, files=files), out)
    write_manifest(out, [META_FILE, *files])
    return out


def check_finite_weights(module: nn.Module, out_dir: Path) -> None:
    """Refuse an actor with a NaN/Inf parameter or buffer: a diverged run must never become an artifact."""
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        bad = int((~torch.isfinite(tensor.detach())).sum()) if tensor.is_floating_point() else 0
        if bad:
            raise ArtifactError(
                f"the actor has {bad} non-finite (NaN/Inf) values: training diverged, nothing "
                f"was exported", file=out_dir.parent if out_dir.name == "policy" else out_dir, key=name,
                fix="export an earlier checkpoint of this run (before the loss became NaN) or retrain with a "
                    "lower learning rate")
