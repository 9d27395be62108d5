"""FastTD3-style agent (Seo, Sferrazza, Geng, Nauman, Yin & Abbeel, "FastTD3: Simple, Fast, and
Capable Reinforcement Learning for Humanoid Control", 2025).

``agent=fast_td3`` with ``critic=c51``: TD3 scaled to many parallel envs and large batches —

- distributional clipped double critics: two C51 critics; the TD target is the projected target
  distribution of whichever target critic has the lower expected value, per sample;
- n-step returns (``n_step=3``) from the replay buffer;
- per-env exploration noise: every env draws its own std uniformly in ``[std_min, std_max]``,
  redrawn when its episode ends;
- the online actor (no target actor) picks target actions, with clipped smoothing noise;
- AdamW with weight decay, empirical observation normalisation.

Shapes: ``B`` batch, ``N`` envs, ``A`` actions, ``E = 2`` critics, ``K`` atoms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from robot_rl.agents.base import EnvSpec, Obs, register_agent
from robot_rl.agents.td3 import TD3, TD3Config
from robot_rl.config.checks import check, fail
from robot_rl.critics.distributional import C51Critic
from robot_rl.data.replay_buffer import ReplayBatch


@dataclass
class FastTD3Config(TD3Config):
    """``agent=fast_td3`` (TD3's settings with FastTD3's defaults, plus).

    Attributes:
        std_min, std_max: range of the per-env exploration std.
    """

    batch_size: int = 32768
    learning_starts: int = 10_240
    utd_ratio: float = 0.002
    n_step: int = 3
    tau: float = 0.1
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    weight_decay: float = 0.1
    actor_hidden_dims: list[int] = field(default_factory=lambda: [512, 256, 128])
    normalize_obs: bool = True
    use_target_actor: bool = False
    actor_reduce: str = "min"
    std_min: float = 0.001
    std_max: float = 0.4

    critics: ClassVar[tuple[str, ...]] = ("c51",)
    """The only ``critic=`` this agent trains: the C51 distributional critic."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "agent", non_negative=("std_min", "std_max"))
        if self.std_min > self.std_max:
            raise fail(self, "agent", "std_max", f"must be >= agent.std_min = {self.std_min}",
                       "a std >= agent.std_min")


@register_agent("fast_td3", FastTD3Config)
class FastTD3(TD3):
    """TD3 with C51 clipped double critics, n-step targets and per-env noise; needs ``critic=c51``."""

    cfg: FastTD3Config
    critic_family = C51Critic

    def __init__(self, cfg: FastTD3Config, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        self.noise_std = self._draw_std(env.num_envs)

    def _draw_std(self, num: int) -> torch.Tensor:
        """``[num, 1]`` stds uniform in ``[std_min, std_max]``."""
        u = torch.rand(num, 1, device=self.device)
        return self.cfg.std_min + u * (self.cfg.std_max - self.cfg.std_min)

    def exploration_std(self, num: int) -> torch.Tensor:
        """``[N, 1]`` the current std of every env."""
        if num != self.noise_std.shape[0]:
            raise ValueError(f"FastTD3 draws noise per env: got {num} observations for {self.noise_std.shape[0]} envs")
        return self.noise_std

    def on_step(self, obs: Obs, step: Any, done: torch.Tensor) -> None:
        """Redraw the exploration std of envs whose episode ended."""
        if bool(done.any()):
            self.noise_std[done] = self._draw_std(int(done.sum()))

    def critic_target(self, batch: ReplayBatch, next_action: torch.Tensor) -> torch.Tensor:
        """Target probabilities ``[B, 1, K]``: the projection of the lower-valued target critic."""
        critic = self.critic
        logits = critic.target_critic().distribution(batch.next_obs[self.critic_group], next_action)
        probs = logits.softmax(-1)  # [E, B, 1, K]
        values = (probs * critic.support).sum(-1)  # [E, B, 1]
        returns = batch.reward.unsqueeze(-1)
        projected = torch.stack([critic.project(p, returns, batch.discount) for p in probs])  # [E, B, 1, K]
        pick = values.argmin(dim=0)  # [B, 1]
        index = pick[None, :, :, None].expand(1, *projected.shape[1:])
        return projected.gather(0, index).squeeze(0)

    def state_dict(self) -> dict[str, Any]:
        """TD3's state plus the per-env exploration stds."""
        return {**super().state_dict(), "noise_std": self.noise_std.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.noise_std.copy_(state["noise_std"])
