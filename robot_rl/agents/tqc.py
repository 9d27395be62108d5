"""Truncated Quantile Critics (Kuznetsov, Shvechikov, Grishin & Vetrov, "Controlling
Overestimation Bias with Truncated Mixture of Continuous Distributional Quantile Critics", ICML 2020).

``agent=tqc`` with ``critic=quantile``: SAC's actor and temperature, but ``C`` quantile critics
(``M`` quantiles each). The target pools the ``C * M`` target atoms, sorts them, drops the
``C * d`` largest (``top_quantiles_to_drop_per_net = d``) to control overestimation, and trains
every critic's quantiles towards ``r + discount * (atoms - alpha * log pi)`` with the quantile
Huber loss. The actor maximises the mean of all quantiles. Defaults follow the paper
(``C = 5``, ``M = 25``, ``d = 2``).

Shapes: ``B`` batch, ``C`` critics, ``M`` quantiles per critic, ``K = C * (M - d)`` kept atoms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.agents.base import EnvSpec, register_agent
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.config.checks import check
from robot_rl.critics.distributional import QuantileCritic
from robot_rl.data.replay_buffer import ReplayBatch
from robot_rl.math.td_targets import truncate_quantiles


@dataclass
class TQCConfig(SACConfig):
    """``agent=tqc`` (SAC's settings, plus).

    Attributes:
        top_quantiles_to_drop_per_net: ``d``, target atoms dropped per critic.
    """

    top_quantiles_to_drop_per_net: int = 2

    critics: ClassVar[tuple[str, ...]] = ("quantile",)
    """The only ``critic=`` this agent trains: the truncated quantile critic."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "agent", at_least_0=("top_quantiles_to_drop_per_net",))


@register_agent("tqc", TQCConfig)
class TQC(SAC):
    """SAC with truncated mixtures of quantile critics; needs ``critic=quantile``."""

    cfg: TQCConfig
    critic_family = QuantileCritic

    def __init__(self, cfg: TQCConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        num_quantiles = self.critic.num_quantiles
        if cfg.top_quantiles_to_drop_per_net >= num_quantiles:
            raise ValueError(
                f"agent.top_quantiles_to_drop_per_net={cfg.top_quantiles_to_drop_per_net} must be < "
                f"critic.num_quantiles={num_quantiles}"
            )

    def critic_target(self, batch: ReplayBatch) -> torch.Tensor:
        """Truncated target atoms ``[B, 1, K]``: ``r + discount * (kept atoms - alpha * log pi)``."""
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(batch.next_obs["policy"])
            atoms = self.critic.target_critic().distribution(batch.next_obs[self.critic_group], next_action)
            kept = truncate_quantiles(atoms[:, :, 0].transpose(0, 1), self.cfg.top_quantiles_to_drop_per_net)
            soft = kept - self.alpha * next_log_prob.unsqueeze(-1) if self.cfg.backup_entropy else kept
            return (batch.reward.unsqueeze(-1) + batch.discount.unsqueeze(-1) * soft).unsqueeze(1)

    def actor_q(self, critic_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[B]`` mean over all critics' quantiles."""
        return self.critic.distribution(critic_obs, action).mean(dim=(0, 2, 3))
