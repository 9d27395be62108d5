"""RL post-training of a fine-tuned VLA with a critic in batched sim (``agent=vla_rl``).

``method=dsrl`` (Wagenmaker et al., "Steering Your Diffusion Policy with Latent Space
Reinforcement Learning", 2025): the SFT run's VLA (``agent.policy=<agent=vla run dir>``) stays frozen and a small
SAC actor picks the flow's initial noise ``w [H, A]`` from the VLA's own context feature
(:mod:`robot_rl.models.vla.steering`). The env seen through the VLA is a semi-MDP whose action is ``w``:

1. chunk-level collection (:mod:`robot_rl.agents._vla_chunks`, shared with ``agent=vla_ppo``): at each chunk
   boundary the VLA encodes the env's cameras, instruction and joints once, the actor draws ``w ~ pi(. | f)`` from
   the feature ``f`` and the VLA decodes the chunk ``VLA.decode(context, state, w)``, played open loop for
   ``execute_len`` steps;
2. the chunk's transition ``(f, w, R, discount, f')`` enters a :class:`~robot_rl.data.chunk_transitions.
   ChunkTransitionBuffer` (``R = sum_k gamma^k r_k``, ``discount = gamma^K``, 0 where the episode ended);
3. SAC on those rows (:mod:`robot_rl.math.soft_actor_critic`): the critic ``Q([f, elapsed], w)`` from the critic
   registry (default ``critic=ensemble_ln``, clipped double Q with LayerNorm), the actor over ``f`` alone (what
   the deployed policy has), the temperature tuned to ``target_entropy``.

With ``critic_input=chunk`` the critic scores the chunk instead of the noise: ``Q([f, elapsed], x)`` over the
executed part ``x [E * A]`` of the standardised chunk the VLA decodes from ``w`` (``agent=vla_guided``'s critic).
Noises that decode to nearly the same chunk then share a value (the noise critic must learn that many-to-one map
from the returns alone), and the actor's gradient reaches ``w`` through the frozen VLA's Euler chain
(``dQ/dw = dQ/dx * dx/dw``; the VLA's parameters get none). An MLP expert reads only the global condition, which
the stored feature holds, so the update decodes from replay rows; a transformer expert is refused.

Before ``learning_starts`` transitions the noise is drawn from the flow's ``N(0, I)`` (clipped to ``noise_bound``):
the warm-up collects the SFT policy sampled, not as deployed (zero noise; on reach_lang ``N(0, I)`` draws succeed
about half as often, and a ``noise_bound`` of 0.5 kept DSRL near the deployed policy: docs/vla.md). No gradient
ever reaches the VLA. The deployed policy (:meth:`VLARLAgent.policy`) is a
:class:`~robot_rl.models.vla.steering.SteeredVLAPolicy`: evaluation, the wrong-instruction check and ``robot-rl eval``
play it as they play an SFT policy.

``method=best_of_n`` (Q-chunking's best-of-N, Li, Zhou & Levine 2025; PA-RL, Mark et al. 2024) collects and
learns on the same chunk transitions without SAC: at each chunk boundary the critic ranks ``num_candidates``
noises (the actor's and draws of ``N(0, I)``, the SFT policy's own) and the VLA decodes the best; the critic backs
up ``R + discount * max_i Q_target(f', w'_i)`` and the actor is distilled onto the best candidate (MSE), so the
deployed policy is the same ``SteeredVLAPolicy`` and needs no critic at run time. The choice is distilled into
the steering actor, not into the VLA's action expert: the VLA stays frozen, as in DSRL.

Shapes: ``N`` envs, ``B`` batch, ``F`` the feature's width
(:func:`~robot_rl.models.vla.steering.context_feature_dim`), ``H`` chunk length, ``A`` actions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from robot_rl.agents._vla_chunks import VLAChunkAgent
from robot_rl.agents.base import BasePolicy, EnvSpec, Obs, register_agent
from robot_rl.config.checks import check
from robot_rl.config.schema import AgentConfig
from robot_rl.critics import CriticSpec, make_critic
from robot_rl.data.chunk_transitions import ChunkTransitionBuffer
from robot_rl.math.soft_actor_critic import actor_loss, soft_target, temperature_loss

METHODS = ("dsrl", "best_of_n")
CRITIC_INPUTS = ("noise", "chunk")


@dataclass
class VLARLConfig(AgentConfig):
    """``agent=vla_rl`` (configs/agent/vla_rl.yaml).

    Attributes:
        policy: the SFT run directory (``agent=vla``) whose VLA is steered (required; its dataset is read for its
            metadata only).
        method: ``dsrl`` (noise-space steering with SAC) or ``best_of_n`` (the critic ranks candidate noises; the
            module docstring).
        num_candidates: ``best_of_n``: noises ranked per chunk (the actor's and ``N - 1`` draws of ``N(0, I)``).
        critic_input: what the critic scores besides the feature: ``noise`` (``Q(f, w)``, DSRL's noise critic) or
            ``chunk`` (``Q(f, x)``, the executed part of the standardised chunk the VLA decodes from ``w``; the actor's
            gradient flows through the frozen VLA; needs an MLP expert; the module docstring).
        noise_bound: the actor's noise lies in ``[-noise_bound, noise_bound]`` (DSRL's action magnitude; the deployed
            SFT policy decodes zero noise, so a smaller bound explores nearer to it).
        execute_len: actions of each chunk played before the next query (0: the SFT run's).
        gamma: discount per env step (a chunk of ``K`` steps discounts its successor by ``gamma^K``).
        tau: Polyak rate of the critic's target copy.
        batch_size: chunk transitions per gradient step.
        buffer_size: chunk transitions kept.
        learning_starts: chunk transitions collected with ``N(0, I)`` noise before the first update.
        utd_ratio: gradient steps per collected chunk transition.
        actor_lr, critic_lr, alpha_lr: Adam learning rates.
        init_alpha: initial temperature.
        target_entropy: entropy the temperature aims for (nats per chunk; 0 by default); ``None`` = ``-H * A``,
            which collapsed the actor onto saturated noise on reach_lang (docs/vla.md).
        actor_hidden_dims: the noise actor's MLP.
        iteration_steps: env steps (all envs) per log row.
    """

    critics: ClassVar[tuple[str, ...]] = ("ensemble", "ensemble_ln", "mlp")

    policy: str | None = None
    method: str = "dsrl"
    num_candidates: int = 8
    critic_input: str = "noise"
    noise_bound: float = 1.5
    execute_len: int = 0
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    buffer_size: int = 100_000
    learning_starts: int = 512
    utd_ratio: float = 1.0
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    init_alpha: float = 0.1
    target_entropy: float | None = 0.0
    actor_hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    iteration_steps: int = 2048

    def __post_init__(self) -> None:
        check(self, "agent", positive=("noise_bound", "utd_ratio", "actor_lr", "critic_lr", "alpha_lr",
                                       "init_alpha", "tau"),
              unit=("gamma",), at_least_0=("execute_len",),
              at_least_1=("batch_size", "buffer_size", "learning_starts", "actor_hidden_dims", "iteration_steps",
                          "num_candidates"),
              choices={"method": METHODS, "critic_input": CRITIC_INPUTS})

    def steps_before_update(self, num_envs: int) -> int:
        """Env steps before the first update: ``learning_starts`` chunks of at least one step each."""
        return self.learning_starts


@register_agent("vla_rl", VLARLConfig)
class VLARLAgent(VLAChunkAgent):
    """DSRL and best-of-N on a frozen VLA (module docstring)."""

    cfg: VLARLConfig

    def __init__(self, cfg: VLARLConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu",
                 base_policy: BasePolicy | None = None):
        super().__init__(cfg, critic_cfg, env, device, base_policy)
        from robot_rl.models.vla.steering import NoiseActor

        noise_dim = self.noise_dim
        if cfg.critic_input == "chunk":
            self.require_condition_expert("agent.critic_input=chunk", "agent.critic_input=noise")
        scored_dim = self.execute_len * self.chunk_shape[1] if cfg.critic_input == "chunk" else noise_dim
        self.actor = NoiseActor(self.feature_dim, *self.chunk_shape, bound=cfg.noise_bound,
                                hidden_dims=tuple(cfg.actor_hidden_dims)).to(self.device)
        self.critic = make_critic(critic_cfg, CriticSpec(obs_dim=self.feature_dim + 1, action_dim=scored_dim))
        self.critic.to(self.device)
        self.critic.target_critic()
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        self.target_entropy = -float(noise_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.buffer = ChunkTransitionBuffer(cfg.buffer_size, self.feature_dim + 1, scored_dim, self.device)
        self.scored_at = torch.zeros(env.num_envs, scored_dim, device=self.device)  # what the critic scores
        self.num_updates = 0
        self.owed = 0.0

    # --- collecting -----------------------------------------------------------------------------------------

    def choose(self, rows: torch.Tensor, context: Any, feature: torch.Tensor, critic_obs: torch.Tensor,
               inputs: dict, deterministic: bool) -> torch.Tensor:
        """The noise (the actor's mean when ``deterministic``; ``N(0, I)`` before ``learning_starts``; SAC's sample
        or the critic's best candidate after) decoded by the frozen VLA; the critic's input (the noise, or the chunk's
        executed part with ``critic_input=chunk``) kept per env."""
        decoded = None  # best-of-N with the chunk critic has decoded its pick already
        if deterministic:
            noise = self.actor(feature)
        elif len(self.buffer) < self.cfg.learning_starts:
            noise = torch.randn(len(rows), *self.chunk_shape, generator=self.generator).to(self.device)
            noise = noise.clamp(-self.cfg.noise_bound, self.cfg.noise_bound)
        elif self.cfg.method == "best_of_n":
            noise, _, _, decoded = self.best_noise(critic_obs, feature)
            noise = noise.view(len(rows), *self.chunk_shape)
        else:
            noise = self.actor.sample(feature, self.sample_generator)[0]
        x0 = self.sft.model.denoise(context, noise) if decoded is None else decoded
        chunk = self.cfg.critic_input == "chunk"
        self.scored_at[rows] = self.executed(x0) if chunk else noise.flatten(1)
        return self.sft.model.to_actions(x0, inputs["state"]).clamp(-1.0, 1.0)

    def store(self, rows: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
              next_obs: torch.Tensor) -> None:
        """Into the replay buffer; ``utd_ratio`` gradient steps owed per transition."""
        self.buffer.add(self.obs_at[rows], self.scored_at[rows], reward, discount, next_obs)
        self.owed += self.cfg.utd_ratio * len(rows)

    @torch.no_grad()
    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """Critic members ``[E, N, 1]``: ``Q([f, elapsed], w)`` (or ``x``) of the chunk each env started at the last
        :meth:`act` (call it right after), NaN for envs inside a chunk (``critic_at_chunk_starts``). A soft value:
        it includes the entropy bonus SAC adds to the returns, ``alpha * entropy`` per future chunk."""
        values = self.critic(self.obs_at, self.scored_at, reduce="none")
        return values.masked_fill(~self.started.view(1, -1, 1), float("nan"))

    # --- learning ---------------------------------------------------------------------------------------------

    def ready(self) -> bool:
        """Past ``learning_starts`` chunk transitions, with a gradient step owed (``utd_ratio`` per transition)."""
        return len(self.buffer) >= self.cfg.learning_starts and self.owed >= 1.0

    def update(self) -> dict[str, float | torch.Tensor]:
        """Every owed gradient step: ``loss/critic``, ``loss/actor``, ``q_mean``; SAC's ``alpha`` and ``entropy``
        (dsrl) or the critic's gain of the best candidate over the actor's own noise, ``best_gain`` (best_of_n)."""
        steps = int(self.owed)
        self.owed -= steps
        metrics: dict[str, torch.Tensor] = {}
        step = self._best_of_n_step if self.cfg.method == "best_of_n" else self._sac_step
        for _ in range(steps):
            metrics = step()
        return {**metrics, "updates": float(self.num_updates)}

    def scored(self, critic_obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """What the critic scores for noises ``noise [B, H, A]`` (or ``[B, H * A]``) at critic observations
        ``[B, F + 1]``: the noise ``[B, H * A]``, or with ``critic_input=chunk`` the executed part ``[B, E * A]`` of
        the standardised chunk the frozen VLA decodes from it (differentiable in the noise)."""
        if self.cfg.critic_input == "noise":
            return noise.flatten(1)
        return self.executed(self.decoded(critic_obs, noise))

    def decoded(self, critic_obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The standardised chunks ``[B, H, A]`` the frozen VLA decodes from noises ``noise [B, H, A]`` (or
        ``[B, H * A]``) at replayed critic observations ``[B, F + 1]`` (:meth:`condition_context`)."""
        return self.sft.model.denoise(self.condition_context(critic_obs), noise.reshape(len(noise), *self.chunk_shape))

    @torch.no_grad()
    def best_noise(self, critic_obs: torch.Tensor, feature: torch.Tensor, target: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Best-of-N in noise space: ``(noise [B, H*A], value [B], actor's value [B], decoded)``.

        The candidates are the actor's noise and ``num_candidates - 1`` draws of ``N(0, I)`` clipped to
        ``noise_bound`` (the SFT policy's own); each is scored by the critic's clipped-double-Q (``min`` over
        members; the target copy with ``target``) at ``critic_obs [B, F + 1]`` (:meth:`scored`) and the highest is kept
        (:func:`robot_rl.models.vla.best_of_n.pick`). With the noise critic nothing is decoded (``decoded`` is None);
        with ``critic_input=chunk`` every candidate is decoded once to score it, and ``decoded [B, H, A]`` is the kept
        one's standardised chunk (what :meth:`choose` plays, not decoded again).
        """
        from robot_rl.models.vla.best_of_n import pick, rank_candidates

        batch, n = feature.shape[0], self.cfg.num_candidates
        drawn = torch.randn(batch, n - 1, self.noise_dim, generator=self.generator).to(self.device)
        candidates = torch.cat([self.actor(feature).flatten(1).unsqueeze(1),
                                drawn.clamp(-self.cfg.noise_bound, self.cfg.noise_bound)], dim=1)
        obs = critic_obs.repeat_interleave(n, dim=0)
        if self.cfg.critic_input == "noise":
            def score(c: torch.Tensor) -> torch.Tensor:
                return self.critic(obs, c.flatten(0, 1), reduce="min", target=target)[:, 0].view(batch, n)

            noise, value, values = rank_candidates(score, candidates)
            return noise, value, values[:, 0], None
        x0 = self.decoded(obs, candidates.flatten(0, 1))
        values = self.critic(obs, self.executed(x0), reduce="min", target=target)[:, 0].view(batch, n)
        _, noise, decoded, value = pick(values, candidates, x0.unflatten(0, (batch, n)), values)
        return noise, value, values[:, 0], decoded

    def _best_of_n_step(self) -> dict[str, torch.Tensor]:
        """Q-chunking's best-of-N backup, ``Q(f, w) <- R + discount * max_i Q_target(f', w'_i)``, and the actor
        distilled onto the best candidate noise at the batch's features (MSE of its mean noise)."""
        cfg = self.cfg
        batch = self.buffer.sample(cfg.batch_size, self.generator)
        feature = batch.obs[:, :-1]
        next_value = self.best_noise(batch.next_obs, batch.next_obs[:, :-1], target=True)[1]
        target = batch.reward + batch.discount * next_value
        critic_loss, info = self.critic.loss(batch.obs, batch.action, target.unsqueeze(1))
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        best, value, actor_value, _ = self.best_noise(batch.obs, feature)
        loss = (self.actor(feature).flatten(1) - best).pow(2).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.critic.update_target(cfg.tau)
        self.num_updates += 1
        return {"loss/critic": critic_loss.detach(), "loss/actor": loss.detach(), "q_mean": info["value_mean"],
                "best_gain": (value - actor_value).mean()}

    def _sac_step(self) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        batch = self.buffer.sample(cfg.batch_size, self.generator)
        feature, next_feature = batch.obs[:, :-1], batch.next_obs[:, :-1]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_noise, next_log_prob = self.actor.sample(next_feature, self.sample_generator)
            next_scored = self.scored(batch.next_obs, next_noise)
            next_q = self.critic(batch.next_obs, next_scored, reduce="min", target=True)[:, 0]
            target = soft_target(batch.reward, batch.discount, next_q, next_log_prob, alpha)
        critic_loss, info = self.critic.loss(batch.obs, batch.action, target.unsqueeze(1))
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        noise, log_prob = self.actor.sample(feature, self.sample_generator)
        q = self.critic(batch.obs, self.scored(batch.obs, noise), reduce="min")[:, 0]  # through the VLA for a chunk
        loss = actor_loss(q, log_prob, alpha)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        alpha_loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        self.critic.update_target(cfg.tau)
        self.num_updates += 1
        return {"loss/critic": critic_loss.detach(), "loss/actor": loss.detach(), "alpha": alpha,
                "q_mean": info["value_mean"], "entropy": -log_prob.detach().mean()}

    # --- what is saved and deployed ---------------------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The noise actor and the critic (the VLA is frozen, loaded from ``agent.policy``)."""
        return {"actor": self.actor, "critic": self.critic}

    def state_dict(self) -> dict[str, Any]:
        """Actor, critic (and its target), temperature, optimisers, replay, generator, counters."""
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic.target_state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "alpha_opt": self.alpha_opt.state_dict(), "buffer": self.buffer.state_dict(),
                "generator": self.generator.get_state(), "num_updates": self.num_updates,
                "chunks_collected": self.chunks_collected, "owed": self.owed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (chunks in flight at the checkpoint are not restored: a resumed run starts
        fresh episodes)."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic.load_target_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        if "buffer" in state:  # the runner drops it when a run is opened with another env count (eval, export)
            self.buffer.load_state_dict(state["buffer"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        self.chunks_collected = int(state["chunks_collected"])
        self.owed = float(state["owed"])

    def policy(self) -> nn.Module:
        """A :class:`~robot_rl.models.vla.steering.SteeredVLAPolicy`: the frozen VLA and a copy of the actor."""
        from robot_rl.models.vla.steering import SteeredVLAPolicy

        actor = copy.deepcopy(self.actor).eval()
        return SteeredVLAPolicy(self.sft.model, self.sft.tokenizer, self.sft.instructions, actor)
