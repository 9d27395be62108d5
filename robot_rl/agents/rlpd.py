"""RLPD: SAC with demonstrations in a separate replay partition, sampled 50/50 (Ball et al. 2023).

``agent=rlpd agent.demos=<dataset dir>`` (its critic defaults to ``critic=ensemble_ln``). Ball et al., "Efficient Online
Reinforcement Learning with Offline Data" (ICML 2023): off-policy RL needs three changes to profit from
offline data: *symmetric sampling* (each batch half demo, half online: the off-policy template's
:class:`~robot_rl.data.demo_source.DemoSource`, mixed by :func:`robot_rl.data.demo_mix.sample_mixed`),
*LayerNorm critics* (``critic=ensemble_ln``, bounds extrapolated Q values) and *sample efficiency
knobs* (a larger ensemble, ``critic.num_members=10 agent.target_reduce=random_min``, and a high
``agent.utd_ratio``). Optionally the actor starts from a behaviour-cloning checkpoint
(``agent.bc_checkpoint=<robot-rl bc out dir>``, a ``gaussian`` BC actor of the same widths).

Demos are read from the dataset every time the agent is built; checkpoints store the dataset path (in
the run's config) and the number of demo transitions, never the demo data. The critic reads the
``critic`` observation group only when the demos recorded it (``observation.critic``); otherwise
(``robot-rl record`` stores the policy observation) the critic reads ``policy`` (``agent.critic_obs``).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.agents.base import EnvSpec, register_agent
from robot_rl.agents.bc import load_clone
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.config.checks import check
from robot_rl.data.demo_source import DemoSource, check_demo_settings, demo_groups, start_from_clone
from robot_rl.data.replay_buffer import ReplayBatch

CRITIC_OBS = ("auto", "policy", "critic")


@dataclass
class RLPDConfig(SACConfig):
    """``agent=rlpd``: SAC's settings plus the demo partition.

    Attributes:
        demos: a ``robot-rl record`` dataset directory (required).
        demo_fraction: share of each batch drawn from the demos (RLPD: 0.5).
        only_success_demos: keep only demo episodes that succeeded.
        bc_checkpoint: a ``robot-rl bc`` output directory to initialise the actor (and the observation
            normaliser; needs ``normalize_obs=true``) from.
        critic_obs: ``auto`` (the ``critic`` group if the demos recorded it, else ``policy``), ``policy``
            or ``critic``.
        bc_weight: ``> 0`` subtracts ``bc_weight * ||a - a_demo||^2`` from the actor's objective on the demo rows
            of each batch (``a`` the sampled action; a TD3+BC-style regulariser that keeps a BC-initialised
            actor near the demos; 0 = RLPD as published).
        critic_warmup_updates: the first this many gradient updates train the critic only (actor and
            temperature frozen), so a BC-initialised actor first meets a critic that has learned its values
            instead of a random one (0 = off, RLPD as published).
        bc_decay_updates: ``> 0`` lowers ``bc_weight`` linearly to 0 over this many updates after the critic
            warm-up (then plain RLPD); 0 keeps ``bc_weight`` for the whole run.
        bc_anchor: what ``bc_weight`` pulls the actor towards: ``demos`` (the demo actions, on the demo rows)
            or ``clone`` (the frozen ``bc_checkpoint`` actor's action ``tanh(mean)``, on every row of the batch:
            a prior that also holds on the online states and does not re-fit the few demos).
    """

    demos: str | None = None
    demo_fraction: float = 0.5
    only_success_demos: bool = False
    bc_checkpoint: str | None = None
    critic_obs: str = "auto"
    bc_weight: float = 0.0
    critic_warmup_updates: int = 0
    bc_decay_updates: int = 0
    bc_anchor: str = "demos"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_demo_settings(self)
        check(self, "agent", at_least_0=("bc_decay_updates",), choices={"critic_obs": CRITIC_OBS})


@register_agent("rlpd", RLPDConfig)
class RLPD(SAC):
    """SAC with a demo partition (:attr:`demo_source`) beside its online replay, mixed into every batch."""

    cfg: RLPDConfig
    demo_source: DemoSource

    def __init__(self, cfg: RLPDConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        if not cfg.demos:
            raise ValueError("agent=rlpd needs demonstrations: agent.demos=<dataset dir> "
                             "(record one with `robot-rl record --task <task> --out <dir>`)")
        dims = demo_groups(cfg.demos, env.observation_dims, "rlpd", cfg.critic_obs)
        super().__init__(cfg, critic_cfg, dataclasses.replace(env, observation_dims=dims), device)
        self.env = env
        self.use_demos(cfg.demos, cfg.demo_fraction, cfg.only_success_demos, prime=not cfg.bc_checkpoint)
        self._anchor: torch.Tensor | None = None  # [n, A] actions the first n rows of the batch are pulled to
        self._bc_weight = cfg.bc_weight  # bc_weight of the update being learned (bc_weight_now)
        self._bc_mse: torch.Tensor | None = None  # mean squared (sampled - anchor) action per dim, for the metrics
        self.bc_prior: nn.Module | None = None
        """``bc_anchor=clone``: the frozen BC actor (normalised obs ``[B, D]`` -> ``[B, A]``); not checkpointed."""
        if cfg.bc_checkpoint:
            self._load_bc(cfg.bc_checkpoint)
            if cfg.bc_anchor == "clone":
                self.bc_prior = copy.deepcopy(self.actor).requires_grad_(False).eval()

    @property
    def demo_transitions(self) -> int:
        """Transitions in the demo partition (checked again on resume)."""
        return len(self.demo_source)

    def _load_bc(self, path: str) -> None:
        """Copy a ``robot-rl bc`` run's actor and normaliser into this agent."""
        cfg = self.cfg
        if not cfg.normalize_obs:
            raise ValueError(f"agent.bc_checkpoint={path} was trained on normalised observations; "
                             "set agent.normalize_obs=true")
        bc = load_clone(path, self.env.observation_dims["policy"], self.env.action_dim)
        if bc.cfg.actor != "gaussian" or list(bc.cfg.actor_hidden_dims) != list(cfg.actor_hidden_dims) \
                or bc.cfg.activation != cfg.activation:
            raise ValueError(
                f"agent.bc_checkpoint={path} holds a {bc.cfg.actor} actor {bc.cfg.actor_hidden_dims}/"
                f"{bc.cfg.activation}; rlpd needs a gaussian one {list(cfg.actor_hidden_dims)}/{cfg.activation}: "
                "`robot-rl bc <dataset> --actor gaussian --hidden-dims ...`"
            )
        self.actor.load_state_dict(bc.actor.state_dict())
        start_from_clone(self.normalizers, bc.normalizer)

    def bc_weight_now(self) -> float:
        """``bc_weight`` at the current update: constant, or decayed linearly after the critic warm-up."""
        cfg = self.cfg
        if cfg.bc_decay_updates == 0:
            return cfg.bc_weight
        done = max(self.updates - cfg.critic_warmup_updates, 0)
        return cfg.bc_weight * max(0.0, 1.0 - done / cfg.bc_decay_updates)

    def learn(self, batch: ReplayBatch) -> dict[str, float | torch.Tensor]:
        """SAC's update; with ``bc_weight`` the demo rows (all rows with ``bc_anchor=clone``) anchor the actor."""
        n_demo = self.demo_rows(batch.action.shape[0])
        self._bc_weight = self.bc_weight_now()
        self._anchor = None
        if self._bc_weight > 0 and self.bc_prior is not None:
            with torch.no_grad():
                self._anchor = self.bc_prior(batch.obs["policy"])
        elif self._bc_weight > 0 and n_demo:
            self._anchor = batch.action[:n_demo]
        self._bc_mse = None
        try:
            metrics = super().learn(batch)
        finally:
            self._anchor = None
        if self._bc_mse is not None:
            metrics["train/bc_mse"] = self._bc_mse
            metrics["train/bc_weight"] = self._bc_weight
        return metrics

    def _actor_and_alpha_step(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """SAC's actor and temperature step, skipped during the first ``critic_warmup_updates`` updates."""
        if self.updates < self.cfg.critic_warmup_updates:
            return {"train/alpha": self.alpha}
        return super()._actor_and_alpha_step(obs, critic_obs)

    def actor_q(self, critic_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[B]`` SAC's actor value, minus ``bc_weight * ||a - a_anchor||^2`` on the anchored rows (when set)."""
        q = super().actor_q(critic_obs, action)
        if self._anchor is None:
            return q
        n = self._anchor.shape[0]
        penalty = (action[:n] - self._anchor).pow(2).sum(-1)
        self._bc_mse = penalty.detach().mean() / action.shape[-1]
        return torch.cat([q[:n] - self._bc_weight * penalty, q[n:]])
