"""Behaviour cloning of actors from a LeRobot-format dataset (``robot-rl bc``).

Three actor kinds, the same networks the off-policy agents use, so a BC checkpoint can start RL:

- ``gaussian``: SAC's tanh-squashed Gaussian (:class:`~robot_rl.agents.off_policy.SquashedGaussianActor`),
  trained on the MSE of its mean action plus ``nll_weight`` x the log-likelihood of the demo action
  (so its std is fitted too and SAC does not start from a random exploration width);
- ``deterministic``: TD3's ``tanh(mlp(obs))`` (:class:`~robot_rl.agents.off_policy.DeterministicActor`), MSE;
- ``chunked``: :class:`~robot_rl.models.chunked_actor.ChunkedActor`, ``h`` future actions per observation,
  read from the dataset as a ``delta_timestamps`` window ``[0, 1/fps, ..., (h-1)/fps]``; steps past the
  episode end are padded by the reader (``<key>_is_pad``) and left out of the loss, as ACT does.

Observations are normalised with the dataset's own ``meta/stats.json`` mean/std (an
:class:`~robot_rl.models.normalizer.EmpiricalNormalizer`, the agents' normaliser, so RL can reuse it).
Episodes are split into train and validation sets; training stops when the validation action MSE has
not improved for ``patience`` epochs and keeps the best weights.

A checkpoint directory holds ``bc.safetensors`` (``actor.*`` and ``normalizer.*`` tensors) and ``bc.yaml``
(config, sizes, dataset, task, measured losses). :func:`export_bc` writes a policy artifact that
``robot-rl eval`` and the deploy runtime read.

Shapes: ``N`` frames, ``D`` policy observation, ``A`` actions, ``h`` chunk length, ``B`` batch.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.agents.off_policy import DeterministicActor, SquashedGaussianActor
from robot_rl.data.lerobot import LeRobotDataset, meta
from robot_rl.data.lerobot.windows import window
from robot_rl.errors import InputError
from robot_rl.math.action_box import from_unit
from robot_rl.models.chunked_actor import ChunkedActor
from robot_rl.models.normalizer import EmpiricalNormalizer

ACTOR_KINDS = ("gaussian", "deterministic", "chunked")
WEIGHTS_FILE, META_FILE = "bc.safetensors", "bc.yaml"


@dataclass
class BCConfig:
    """Behaviour-cloning settings.

    Attributes:
        actor: ``gaussian`` (SAC's actor), ``deterministic`` (TD3's) or ``chunked``.
        hidden_dims, activation: actor MLP (match the RL agent's to start RL from it).
        chunk_len: actions per prediction (``chunked`` only; ``h``).
        epochs: most passes over the training frames.
        batch_size, lr, weight_decay: AdamW settings.
        val_fraction: fraction of episodes held out for validation (at least one when there are two).
        patience: stop after this many epochs without a lower validation MSE.
        nll_weight: ``gaussian`` only, weight of the demo actions' negative log-likelihood per dim.
        only_success: train on episodes whose ``next.success`` is ever set.
        obs_key, action_key: dataset features (raw policy action in ``[-1, 1]``, as ``robot-rl record`` writes).
        seed: split, initialisation and batch order.
    """

    actor: str = "gaussian"
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    chunk_len: int = 1
    epochs: int = 300
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    val_fraction: float = 0.1
    patience: int = 30
    nll_weight: float = 0.01
    only_success: bool = False
    obs_key: str = "observation.policy"
    action_key: str = "action.policy"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.actor not in ACTOR_KINDS:
            raise ValueError(f"bc actor must be one of {ACTOR_KINDS}, got {self.actor!r}")
        if self.chunk_len < 1 or (self.actor != "chunked" and self.chunk_len != 1):
            raise ValueError(
                f"chunk_len={self.chunk_len}: use chunk_len >= 1 with actor=chunked, and 1 for {self.actor!r}"
            )
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        for name in ("epochs", "batch_size", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"bc {name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"bc lr must be > 0, got {self.lr}")


@dataclass
class DemoArrays:
    """Frames of a dataset ready for cloning: ``obs`` ``[N, D]``, ``actions`` ``[N, h, A]``, ``mask`` ``[N, h]``
    (False where the window ran past the episode end), ``episode`` ``[N]``."""

    obs: np.ndarray
    actions: np.ndarray
    mask: np.ndarray
    episode: np.ndarray
    obs_mean: np.ndarray
    obs_std: np.ndarray
    obs_count: int
    task: str


def load_demo_arrays(root: str | Path, cfg: BCConfig) -> DemoArrays:
    """Read observations and (windowed) actions of ``root`` for ``cfg``."""
    fps = meta.load_info(Path(root)).fps
    ds = LeRobotDataset(root, delta_timestamps={cfg.action_key: [i / fps for i in range(cfg.chunk_len)]})
    for key in (cfg.obs_key, cfg.action_key):
        if key not in ds.features:
            raise KeyError(f"{root} has no feature {key!r}; features: {sorted(ds.features)}. Record it with "
                           "`robot-rl record`, or pass obs_key/action_key naming the right columns")
    obs = ds.column(cfg.obs_key).astype(np.float32)
    actions = ds.column(cfg.action_key).astype(np.float32)
    episode = ds.column("episode_index").astype(np.int64)
    if obs.ndim != 2 or actions.ndim != 2:
        raise ValueError(f"{cfg.obs_key} and {cfg.action_key} must be vectors per frame; got shapes "
                         f"{obs.shape[1:]} and {actions.shape[1:]}")
    ds.require_finite(cfg.obs_key, cfg.action_key)  # nothing non-finite is learned from
    ranges = np.array([ds.episode_range(e) for e in range(ds.num_episodes)], dtype=np.int64)  # [E, 2]
    rows, pad = window(np.arange(len(ds))[:, None], ranges[episode, :1], ranges[episode, 1:],
                       ds.delta_indices[cfg.action_key][None, :])
    keep = np.ones(len(ds), dtype=bool)
    if cfg.only_success:
        success = ds.column("next.success")
        keep = np.isin(episode, np.unique(episode[success.astype(bool)]))
        if not keep.any():
            raise ValueError(f"{root}: no episode succeeded; drop only_success or record successful demos")
    stats = ds.stats.get(cfg.obs_key, {})
    mean = np.asarray(stats.get("mean", obs.mean(0)), dtype=np.float32).reshape(-1)  # finite: checked on open
    std = np.asarray(stats.get("std", obs.std(0)), dtype=np.float32).reshape(-1)
    count = int(np.asarray(stats.get("count", len(obs))).reshape(-1)[0])
    return DemoArrays(obs[keep], actions[rows[keep]], ~pad[keep], episode[keep], mean, std, count,
                      _task_of(root))


def _task_of(root: str | Path) -> str:
    """The sim task named in ``meta/robot_rl.json`` ("" for datasets not written by ``robot-rl record``)."""
    path = Path(root) / "meta" / "robot_rl.json"
    if not path.is_file():
        return ""
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"is not valid JSON ({err})", file=path,
                         fix="restore it from a copy, or delete it and pass --task") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("sim_task", ""), str):
        raise InputError("must be a JSON object whose 'sim_task' is a string", file=path, key="sim_task",
                         fix="restore it from a copy, or delete it and pass --task")
    return doc.get("sim_task", "")


def build_actor(cfg: BCConfig, obs_dim: int, action_dim: int) -> nn.Module:
    """The untrained actor of ``cfg.actor``: normalised obs ``[B, D]`` -> ``[B, A]`` (chunked ``[B, h, A]``)."""
    if cfg.actor == "gaussian":
        return SquashedGaussianActor(obs_dim, action_dim, list(cfg.hidden_dims), cfg.activation)
    if cfg.actor == "deterministic":
        return DeterministicActor(obs_dim, action_dim, list(cfg.hidden_dims), cfg.activation)
    return ChunkedActor(obs_dim, action_dim, cfg.chunk_len, list(cfg.hidden_dims), cfg.activation)


def make_normalizer(mean: np.ndarray, std: np.ndarray, count: int) -> EmpiricalNormalizer:
    """An agent normaliser holding the dataset statistics (mean ``[D]``, std ``[D]``)."""
    norm = EmpiricalNormalizer(len(mean))
    with torch.no_grad():
        norm.mean.copy_(torch.as_tensor(mean))
        norm.var.copy_(torch.as_tensor(std).pow(2))
        norm.count.fill_(max(int(count), 1))
    return norm


def predict_chunk(actor: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """Deterministic prediction ``[B, h, A]`` (``h = 1`` for one-step actors) for normalised ``obs`` ``[B, D]``."""
    out = actor(obs)
    return out if out.dim() == 3 else out.unsqueeze(1)


def bc_loss(actor: nn.Module, cfg: BCConfig, obs: torch.Tensor, actions: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, mse)``: masked action MSE (plus the Gaussian NLL term) on a batch.

    ``obs`` ``[B, D]`` normalised, ``actions`` ``[B, h, A]`` in ``[-1, 1]``, ``mask`` ``[B, h]`` bool.
    """
    weights = mask.float().unsqueeze(-1)  # [B, h, 1]
    denom = weights.sum().clamp_min(1.0) * actions.shape[-1]
    mse = ((predict_chunk(actor, obs) - actions).pow(2) * weights).sum() / denom
    if cfg.actor != "gaussian" or cfg.nll_weight == 0:
        return mse, mse
    mean, log_std = actor.net(obs).chunk(2, dim=-1)
    log_std = log_std.clamp(actor.LOG_STD_MIN, actor.LOG_STD_MAX)
    u = torch.atanh(actions[:, 0].clamp(-0.999, 0.999))
    nll = 0.5 * ((u - mean) / log_std.exp()).pow(2) + log_std + 0.5 * math.log(2 * math.pi)
    return mse + cfg.nll_weight * nll.mean(), mse


def split_episodes(episodes: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks ``[N]`` (train, val) holding out whole episodes (none when ``val_fraction`` is 0)."""
    unique = np.unique(episodes)
    n_val = 0 if val_fraction == 0 or len(unique) < 2 else max(1, round(val_fraction * len(unique)))
    val_eps = np.random.default_rng(seed).permutation(unique)[:n_val]
    val = np.isin(episodes, val_eps)
    return ~val, val


@dataclass
class BCResult:
    """What :func:`train_bc` produced: the best actor, its normaliser and the loss history."""

    actor: nn.Module
    normalizer: EmpiricalNormalizer
    cfg: BCConfig
    history: list[dict[str, float]]
    best_epoch: int
    train_frames: int
    val_frames: int
    task: str
    dataset: str

    @property
    def best(self) -> dict[str, float]:
        """Losses of the kept epoch."""
        return self.history[self.best_epoch]


def train_bc(root: str | Path, cfg: BCConfig | None = None, progress: bool = True) -> BCResult:
    """Clone the actions of dataset ``root``; returns the actor with the lowest validation MSE."""
    from tqdm import tqdm

    cfg = cfg or BCConfig()
    data = load_demo_arrays(root, cfg)
    torch.manual_seed(cfg.seed)
    normalizer = make_normalizer(data.obs_mean, data.obs_std, data.obs_count)
    with torch.no_grad():
        obs = normalizer(torch.as_tensor(data.obs))
    actions, mask = torch.as_tensor(data.actions), torch.as_tensor(data.mask)
    train, val = split_episodes(data.episode, cfg.val_fraction, cfg.seed)
    train_idx, val_idx = torch.as_tensor(np.flatnonzero(train)), torch.as_tensor(np.flatnonzero(val))
    actor = build_actor(cfg, obs.shape[1], actions.shape[-1])
    optimizer = torch.optim.AdamW(actor.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    history: list[dict[str, float]] = []
    best_state, best_epoch, best_val = copy.deepcopy(actor.state_dict()), 0, float("inf")
    bar = tqdm(range(cfg.epochs), desc="bc", unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        actor.train()
        total, seen = 0.0, 0
        for batch in train_idx[torch.randperm(len(train_idx), generator=gen)].split(cfg.batch_size):
            loss, mse = bc_loss(actor, cfg, obs[batch], actions[batch], mask[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, seen = total + float(mse.detach()) * len(batch), seen + len(batch)
        actor.eval()
        with torch.no_grad():
            held = val_idx if len(val_idx) else train_idx
            val_mse = float(bc_loss(actor, cfg, obs[held], actions[held], mask[held])[1])
        history.append({"epoch": epoch, "train_mse": total / max(seen, 1), "val_mse": val_mse})
        bar.set_postfix(train=f"{total / max(seen, 1):.4f}", val=f"{val_mse:.4f}")
        if val_mse < best_val:
            best_val, best_epoch, best_state = val_mse, epoch, copy.deepcopy(actor.state_dict())
        elif epoch - best_epoch >= cfg.patience:
            break
    bar.close()
    actor.load_state_dict(best_state)
    actor.eval()
    return BCResult(actor, normalizer, cfg, history, best_epoch, int(train.sum()), int(val.sum()),
                    data.task, str(root))


class BCPolicy(nn.Module):
    """Deployable BC policy: raw obs ``[B, D]`` -> action ``[B, A]`` in ``[-1, 1]`` (chunk step 0)."""

    def __init__(self, normalizer: nn.Module, actor: nn.Module) -> None:
        super().__init__()
        self.normalizer, self.actor = normalizer, actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Action ``[B, A]``."""
        return predict_chunk(self.actor, self.normalizer(obs))[:, 0]

    def chunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The whole predicted chunk flattened, ``[B, h * A]`` (the artifact's output layout)."""
        return predict_chunk(self.actor, self.normalizer(obs)).flatten(1)


def check_finite_weights(tensors: dict[str, torch.Tensor], source: object) -> None:
    """Refuse weights holding NaN or inf (a diverged training run): nothing non-finite is saved or exported."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise InputError(
                "holds NaN or inf: training diverged (or the checkpoint is corrupt); nothing was saved",
                file=source, key=name, fix="lower --lr, check the dataset's values and meta/stats.json, and retrain")


def save_bc(result: BCResult, out_dir: str | Path) -> Path:
    """Write ``bc.safetensors`` + ``bc.yaml`` into ``out_dir``; returns it. Refuses non-finite weights or losses."""
    out = Path(out_dir)
    tensors = {f"actor.{k}": v.detach().contiguous().clone() for k, v in result.actor.state_dict().items()}
    tensors |= {f"normalizer.{k}": v.detach().contiguous().clone() for k, v in result.normalizer.state_dict().items()}
    check_finite_weights(tensors, f"BC of {result.dataset}")
    if not all(math.isfinite(v) for v in result.best.values()):
        raise InputError("are not finite: training diverged; nothing was saved", file=f"BC of {result.dataset}",
                         key="best epoch losses", value=result.best, fix="lower --lr and retrain")
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / WEIGHTS_FILE)
    first = result.actor.net[0]
    doc = {
        "config": asdict(result.cfg), "obs_dim": int(first.in_features), "action_dim": _action_dim(result.actor),
        "dataset": str(Path(result.dataset).resolve()), "task": result.task, "best_epoch": result.best_epoch,
        "epochs_run": len(result.history), "train_frames": result.train_frames, "val_frames": result.val_frames,
        "best": result.best,
    }
    with open(out / META_FILE, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return out


def _action_dim(actor: nn.Module) -> int:
    if isinstance(actor, ChunkedActor):
        return actor.action_dim
    out = actor.net[-1].out_features
    return out // 2 if isinstance(actor, SquashedGaussianActor) else out


@dataclass
class LoadedBC:
    """A BC checkpoint read back: ``actor`` (on normalised obs), ``normalizer``, config and metadata."""

    actor: nn.Module
    normalizer: EmpiricalNormalizer
    cfg: BCConfig
    meta: dict[str, Any]

    def policy(self) -> BCPolicy:
        """A detached deployable copy (raw obs in)."""
        return BCPolicy(copy.deepcopy(self.normalizer), copy.deepcopy(self.actor)).eval()


def load_bc(path: str | Path) -> LoadedBC:
    """Read a BC checkpoint directory written by :func:`save_bc` (or ``robot-rl bc``)."""
    path = Path(path)
    if not (path / META_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a BC checkpoint (needs {META_FILE} and {WEIGHTS_FILE}); "
                                "create one with `robot-rl bc <dataset> --out <dir>`")
    with open(path / META_FILE) as f:
        meta = yaml.safe_load(f)
    cfg = BCConfig(**meta["config"])
    tensors = load_file(path / WEIGHTS_FILE)
    check_finite_weights(tensors, path / WEIGHTS_FILE)
    actor = build_actor(cfg, int(meta["obs_dim"]), int(meta["action_dim"]))
    actor.load_state_dict({k[len("actor."):]: v for k, v in tensors.items() if k.startswith("actor.")})
    normalizer = EmpiricalNormalizer(int(meta["obs_dim"]))
    normalizer.load_state_dict({k[len("normalizer."):]: v for k, v in tensors.items() if k.startswith("normalizer.")})
    return LoadedBC(actor.eval(), normalizer, cfg, meta)


class _ArtifactNet(nn.Module):
    """Normalised obs ``[B, D]`` -> env actions of every chunk step ``[B, h * A]`` (for :class:`PolicyHead`)."""

    def __init__(self, actor: nn.Module, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("low", low.float().clone())
        self.register_buffer("high", high.float().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        y = predict_chunk(self.actor, obs)
        return from_unit(y, self.low, self.high).flatten(1)


def export_bc(bc: LoadedBC, out_dir: str | Path, task: str | None = None,
              formats: tuple[str, ...] = ("onnx",)) -> Path:
    """Write the BC policy as a policy artifact (``policy.yaml`` + ``policy.onnx``) for ``task``'s robot."""
    import sim
    from robot_rl.export import PolicyHead, export_policy, make_meta

    task = task or bc.meta.get("task") or ""
    if not task:
        raise ValueError("the dataset names no sim task (meta/robot_rl.json); pass task=<sim task>")
    env = sim.make_env(task, num_envs=1)
    robot = env.robot
    meta = make_meta(
        robot=robot.name, joint_names=robot.joint_names, default_joint_pos=[j.default for j in robot.joints],
        observation_layout=env.observation_layout["policy"], action_scale=robot.control.action_scale,
        control_hz=robot.control.policy_hz, action_type=robot.control.action_type,
        chunk_length=bc.cfg.chunk_len, task=task,
        training={"bc": {k: bc.meta[k] for k in ("dataset", "best_epoch", "epochs_run", "best")}},
        config={"bc": asdict(bc.cfg)},
    )
    norm = bc.normalizer
    head = PolicyHead(_ArtifactNet(copy.deepcopy(bc.actor), env.action_low, env.action_high), meta,
                      obs_mean=norm.mean, obs_std=norm.var.sqrt() + norm.eps)
    return export_policy(head, meta, out_dir, list(formats))
