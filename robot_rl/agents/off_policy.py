"""What every off-policy agent shares: replay, warm-up, update-to-data ratio, actors, persistence.

SAC, TD3 (and DDPG), TQC, the FastTD3-style agent, RLPD, chunked TD3 and TD-MPC subclass
:class:`OffPolicyAgent`. The template owns the action bounds and their scaling, observation
normalisation, the warm-up, ``observe`` / ``ready``, the update-to-data loop under ``agent.amp``, fused
optimisers, the counters, ``state_dict`` / ``load_state_dict`` and the exported policy. A subclass
implements what differs:

- :meth:`~OffPolicyAgent.build_actor` (required): the actor network;
- :meth:`~OffPolicyAgent.explore` (required): exploratory actions;
- :meth:`~OffPolicyAgent.learn` (required): one gradient update on a sampled batch;
- :attr:`~OffPolicyAgent.critic_family` / :meth:`~OffPolicyAgent.check_critic`: which critics it trains (what
  it needs to know of the critic, e.g. its ``chunk_len``, it reads from the critic object);
- :meth:`~OffPolicyAgent.draw`: what a batch is (n-step transitions, chunks: a sampler of
  :mod:`robot_rl.data.replay_buffer`); with demonstrations (:meth:`~OffPolicyAgent.use_demos`) every batch mixes
  demo rows first (:class:`robot_rl.data.demo_source.DemoSource`); :meth:`~OffPolicyAgent.sample_batch` for
  batches of another kind (TD-MPC's windows);
- :meth:`~OffPolicyAgent.execute`, :meth:`~OffPolicyAgent.random_action`,
  :meth:`~OffPolicyAgent.deterministic_action`: how actions reach the env (an executor playing chunks);
- :meth:`~OffPolicyAgent.on_step`: per-env state kept while collecting;
- :meth:`~OffPolicyAgent.networks`, :meth:`~OffPolicyAgent.optimizers`, :meth:`~OffPolicyAgent.export_actor`:
  what is saved and what is deployed.

Actors work in the normalised action box ``[-1, 1]^A``; env actions are mapped affinely onto
``[action_low, action_high]``, and the replay buffer stores the normalised actions.

Shapes: ``N`` envs, ``B`` batch, ``D`` policy obs, ``Dc`` critic obs, ``A`` actions.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from robot_rl.agents.base import Agent, EnvSpec, Obs
from robot_rl.config.checks import check, fail
from robot_rl.config.registry import key_of
from robot_rl.config.schema import AgentConfig
from robot_rl.critics import Critic, CriticSpec, make_critic
from robot_rl.critics.registry import key_of_class
from robot_rl.data.demo_source import DemoSource
from robot_rl.data.replay_buffer import ReplayBuffer
from robot_rl.math.action_box import from_unit, to_unit
from robot_rl.models.mlp import ACTIVATIONS, fp32_head, mlp
from robot_rl.models.normalizer import EmpiricalNormalizer

REDUCES = ("min", "mean", "random_min")
AMP_MODES = ("none", "bf16")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")
"""``torch.cpu.get_capabilities()`` keys of the instructions that multiply bfloat16 in hardware (x86: AVX512-BF16,
AMX; ARM64: BF16, SVE-BF16). Without one of them torch's CPU kernels convert and multiply bfloat16 in software."""


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (any of :data:`NATIVE_BF16`)."""
    capabilities = torch.cpu.get_capabilities()
    return any(capabilities.get(name, False) for name in NATIVE_BF16)


def warn_if_bf16_is_emulated(amp: str, device: torch.device) -> None:
    """Warn that ``agent.amp=bf16`` will be slow where the CPU has no bfloat16 instructions.

    Measured 2026-12-06 on a 2-core AMD EPYC (AVX2, no AVX512-BF16/AMX), torch 2.13: SAC's update at batch 256 took
    195 ms in bf16 against 23 ms in float32 (8.4x slower; ``benchmarks/agent_update_time.py``), where the earlier dev
    machine's CPU (AVX512-BF16) ran it ~1.4x faster than float32 (docs/agents.md). The arithmetic is unchanged: this
    only warns.
    """
    if amp == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        name = torch.cpu.get_capabilities().get("cpu_name", "this CPU")
        warnings.warn(f"agent.amp=bf16 on {name}, which has no bfloat16 instructions (AVX512-BF16, AMX or ARM BF16): "
                      "torch emulates them, and SAC's update measured 8.4x SLOWER than float32 on such a CPU. "
                      "Fix: agent.amp=none (float32; same algorithm)", stacklevel=3)


@dataclass
class OffPolicyConfig(AgentConfig):
    """Settings every off-policy agent has (its own config class adds the rest).

    Attributes:
        gamma: discount.
        tau: Polyak rate of the target networks (``target <- (1 - tau) target + tau online``).
        batch_size: transitions per gradient update.
        buffer_size: replay capacity in transitions over all envs.
        learning_starts: transitions collected with uniform random actions before learning.
        utd_ratio: update-to-data ratio, gradient updates per collected transition (fractions
            accumulate: 0.01 with 64 envs is 0.64 updates per env step).
        n_step: n-step return horizon.
        actor_lr, critic_lr: Adam learning rates.
        weight_decay: AdamW weight decay of actor and critic (0 = Adam).
        actor_hidden_dims, activation: actor MLP.
        normalize_obs: empirical observation normalisation (statistics travel with the policy).
        target_reduce: how critic members combine in the TD target (``min`` = clipped double,
            ``random_min`` = REDQ, ``mean``).
        actor_reduce: how critic members combine in the actor loss.
        checkpoint_buffer: save the replay buffer in :meth:`state_dict` (exact resume; large).
        iteration_steps: transitions (all envs) per runner iteration: one log line, and
            ``checkpoint_interval`` counts iterations (:meth:`OffPolicyAgent.iteration_done`).
        amp: ``none`` (float32) or ``bf16``: :meth:`OffPolicyAgent.learn` runs under
            ``torch.autocast(dtype=bfloat16)``, so hidden-layer matmuls run in bfloat16 while master
            weights, optimiser state, output layers, log-probabilities, temperature and losses stay
            float32 (FastTD3's mixed precision). On a CPU with AVX512-BF16/AMX the matmuls are ~2x
            faster; on one without, torch emulates bfloat16 and the update is ~8x SLOWER (a warning says so:
            :func:`warn_if_bf16_is_emulated`; docs/agents.md has the measured update times and learning curves).
    """

    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    buffer_size: int = 1_000_000
    learning_starts: int = 5000
    utd_ratio: float = 1.0
    n_step: int = 1
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    weight_decay: float = 0.0
    actor_hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    normalize_obs: bool = False
    target_reduce: str = "min"
    actor_reduce: str = "min"
    checkpoint_buffer: bool = True
    iteration_steps: int = 1000
    amp: str = "none"

    critics: ClassVar[tuple[str, ...]] = ("ensemble", "ensemble_ln", "flow", "mlp", "multi")
    """The ``critic=`` options the agent can train (checked when the config is read): Q critics regressing
    scalar TD targets (a single-network one only with ``target_reduce=mean``). Subclasses narrow it."""

    def __post_init__(self) -> None:
        check(self, "agent", unit=("gamma",), positive=("tau", "utd_ratio", "actor_lr", "critic_lr"),
              non_negative=("weight_decay",),
              at_least_1=("batch_size", "buffer_size", "n_step", "iteration_steps", "actor_hidden_dims"),
              at_least_0=("learning_starts",),
              choices={"target_reduce": REDUCES, "actor_reduce": REDUCES, "amp": AMP_MODES,
                       "activation": ACTIVATIONS})
        if self.tau > 1.0:
            raise fail(self, "agent", "tau", "must be <= 1", "a Polyak rate in (0, 1]")

    def steps_before_update(self, num_envs: int) -> int:
        """Env steps (all envs) collected before the first update can happen: the warm-up, at least one
        vector step."""
        return max(self.learning_starts, num_envs)


Metrics = dict[str, float | torch.Tensor]
"""Training metrics of one update or a sum of them: Python floats, or 0-d tensors left on the device."""


def add_metrics(sums: Metrics, step: Metrics) -> None:
    """Add one update's ``step`` metrics to ``sums`` in place. Tensors are summed as 0-d float64 tensors on their
    device (the same sums as Python floats would give, without a host sync per update); the runner's logger
    converts them once per log interval."""
    for k, v in step.items():
        v = v.double() if isinstance(v, torch.Tensor) else v
        sums[k] = sums[k] + v if k in sums else v


def mean_metrics(sums: Metrics, count: int) -> Metrics:
    """``sums`` of ``count`` updates averaged (``sums`` itself when ``count`` is 1)."""
    return sums if count == 1 else {k: v / max(count, 1) for k, v in sums.items()}


class DeterministicActor(nn.Module):
    """``a = tanh(mlp(obs))``: normalised obs ``[B, D]`` -> action ``[B, A]`` in ``[-1, 1]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: list[int], act: str) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden_dims, action_dim, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``[B, A]``."""
        return torch.tanh(fp32_head(self.net, obs))


class SquashedGaussianActor(nn.Module):
    """SAC's actor: ``a = tanh(u)``, ``u ~ N(mu(obs), sigma(obs)^2)``; ``forward`` is ``tanh(mu)``."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: list[int], act: str) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden_dims, 2 * action_dim, act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``tanh(mu)`` ``[B, A]``."""
        return torch.tanh(fp32_head(self.net, obs).chunk(2, dim=-1)[0])

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action ``[B, A]`` and its log-probability ``[B]`` (tanh-corrected, float32)."""
        mean, log_std = fp32_head(self.net, obs).chunk(2, dim=-1)
        log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        u = mean + log_std.exp() * torch.randn_like(mean)
        action = torch.tanh(u)
        normal_log_prob = -0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = (normal_log_prob - torch.log1p(-action.pow(2) + 1e-6)).sum(-1)
        return action, log_prob


class ExportedPolicy(nn.Module):
    """Deployable policy: raw ``obs["policy"]`` ``[B, D]`` -> env action ``[B, A]`` (normaliser inside)."""

    def __init__(self, normalizer: nn.Module, actor: nn.Module, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Action in env units ``[B, A]``."""
        y = self.actor(self.normalizer(obs))
        return from_unit(y, self.low, self.high)


class OffPolicyAgent(Agent, abc.ABC):
    """Replay-based agent; subclasses build ``self.actor`` and implement :meth:`learn`, :meth:`explore` (and the
    optional hooks of the module docstring)."""

    critic_family: ClassVar[type[Critic] | None] = None
    """The critic class the agent trains (TQC: quantile, FastTD3: C51); ``None`` = any Q critic that
    regresses scalar targets (``target_shape == ("B", "G")``). Checked by :meth:`check_critic`."""

    def __init__(self, cfg: OffPolicyConfig, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu"):
        super().__init__(cfg, critic_cfg, env, device)
        warn_if_bf16_is_emulated(cfg.amp, self.device)
        self.critic_group = env.critic_group
        D, A = env.observation_dims["policy"], env.action_dim
        Dc = env.observation_dims[self.critic_group]
        self.low = env.action_low.to(self.device).float()
        self.high = env.action_high.to(self.device).float()
        if not torch.isfinite(self.low).all() or not torch.isfinite(self.high).all() or (self.high <= self.low).any():
            raise ValueError(
                f"off-policy agents need finite action bounds with low < high, got {self.low} .. {self.high}"
            )
        self.normalizers = nn.ModuleDict(
            {g: EmpiricalNormalizer(env.observation_dims[g]) if cfg.normalize_obs else nn.Identity()
             for g in {"policy", self.critic_group}}
        ).to(self.device)
        self.critic = make_critic(critic_cfg, CriticSpec(obs_dim=Dc, action_dim=A)).to(self.device)
        self.check_critic()
        self.critic.target_critic()
        self.critic_optimizer = self._optimizer(self.critic.parameters(), cfg.critic_lr)
        groups = {g: env.observation_dims[g] for g in {"policy", self.critic_group}}
        capacity = max(1, math.ceil(cfg.buffer_size / env.num_envs))
        self.buffer = ReplayBuffer(capacity, env.num_envs, groups, A, self.device)
        self.demo_source: DemoSource | None = None
        """The read-only demo partition mixed into every batch (:meth:`use_demos`), or None."""
        self.env_steps = 0
        """Transitions collected (all envs)."""
        self.updates = 0
        """Gradient updates done."""
        self.update_credit = 0.0
        """Updates owed by the UTD ratio and not yet done."""
        self.actor: nn.Module = self.build_actor(D, A)

    # --- what subclasses implement -----------------------------------------------------------

    @abc.abstractmethod
    def build_actor(self, obs_dim: int, action_dim: int) -> nn.Module:
        """The actor network (normalised obs ``[B, D]`` -> action in ``[-1, 1]``)."""

    @abc.abstractmethod
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploratory normalised actions ``[N, A]`` for normalised policy obs ``[N, D]``."""

    @abc.abstractmethod
    def learn(self, batch: Any) -> Metrics:
        """One gradient update on a batch of :meth:`sample_batch` (obs already normalised); returns metrics (floats
        or detached 0-d tensors: no ``float()`` on a device tensor here, that would sync every update)."""

    # --- hooks with a default ----------------------------------------------------------------

    def random_action(self, obs: torch.Tensor) -> torch.Tensor:
        """Warm-up actions, uniform in ``[-1, 1]``, for normalised policy obs ``[n, D]``: ``[n, A]``."""
        return torch.rand(obs.shape[0], self.env.action_dim, device=self.device) * 2 - 1

    def execute(self, obs: torch.Tensor, source: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The normalised actions ``[N, A]`` the envs take this step, given ``source`` (:meth:`random_action` or
        :meth:`explore`) on normalised policy obs ``[N, D]``. Default: ``source(obs)``; an agent acting in chunks
        plays them through its executor here."""
        return source(obs)

    def deterministic_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The evaluation action ``[B, A]`` in ``[-1, 1]`` for normalised policy obs ``[B, D]``: the actor's."""
        return self.actor(obs)

    def on_step(self, obs: Obs, step: Any, done: torch.Tensor) -> None:
        """Called by :meth:`observe` for every step before it is stored (``done`` ``[N]``): per-env exploration or
        execution state."""

    # --- shared helpers ----------------------------------------------------------------------

    def check_critic(self) -> None:
        """The one check of the critic an agent got: refuse one it cannot train, naming the fix (the agent's default
        critic); without a :attr:`critic_family`, a Q critic of single actions regressing scalar targets; refuse a
        single-member critic when ``target_reduce`` needs an ensemble."""
        need = self.critic_family
        if need is not None:
            ok, what = isinstance(self.critic, need), f"critic={key_of_class(need)} ({need.__name__})"
        else:
            ok = self.critic.takes_action and self.critic.target_shape == ("B", "G") and self.critic.chunk_len == 1
            what = ("a Q critic regressing scalar TD targets of single actions such as critic=ensemble (not a V, "
                    "distributional or chunked one)")
        if not ok:
            agent, critic = key_of("agent", self.cfg), key_of_class(type(self.critic))
            raise ValueError(
                f"agent={agent} cannot train critic={critic} ({type(self.critic).__name__}): it needs {what}. "
                f"Leave critic= out to get agent={agent}'s default (the `override /critic` line of "
                f"configs/agent/{agent}.yaml)"
            )
        spec, H = self.critic.spec, self.critic.chunk_len
        action = torch.zeros(1, *((spec.action_dim,) if H == 1 else (H, spec.action_dim)), device=self.device)
        with torch.no_grad():
            members = self.critic.estimates(self.critic.encode(torch.zeros(1, spec.obs_dim, device=self.device)),
                                            action)
        if self.cfg.target_reduce != "mean" and members.shape[0] < 2:
            raise ValueError(
                f"agent.target_reduce={self.cfg.target_reduce} needs a critic ensemble (clipped double Q), but the "
                f"critic has {members.shape[0]} member; use critic=ensemble (or leave critic= out for the "
                "agent's default), or agent.target_reduce=mean for a single critic (DDPG)"
            )

    def _optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        """Adam (AdamW with ``weight_decay``) with the fused multi-tensor kernel (one call per step)."""
        if self.cfg.weight_decay > 0:
            return torch.optim.AdamW(params, lr=lr, weight_decay=self.cfg.weight_decay, fused=True)
        return torch.optim.Adam(params, lr=lr, fused=True)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The mixed-precision context :meth:`learn` runs in (``agent.amp``; a no-op for ``none``)."""
        if self.cfg.amp == "bf16":
            # No cast cache: learn() steps an optimiser mid-call, and a cached bf16 copy of a stepped
            # weight would be stale for any later forward in the same call.
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def to_env_action(self, y: torch.Tensor) -> torch.Tensor:
        """Normalised ``[-1, 1]`` actions -> env units ``[B, A]``."""
        return from_unit(y, self.low, self.high)

    def from_env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env-unit actions -> normalised ``[-1, 1]`` ``[B, A]``."""
        return to_unit(action, self.low, self.high).clamp(-1.0, 1.0)

    @torch.no_grad()
    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """Critic members ``[E, N, G]`` of raw observation groups ``obs`` and env actions ``[N, A]``: the
        critic reads the normalised critic group (through ``critic.encode``) and the action in ``[-1, 1]``."""
        x = self.critic.encode(self.normalize(obs)[self.critic_group])
        return self.critic(x, self.from_env_action(action), reduce="none")

    def normalize(self, obs: Obs) -> Obs:
        """Normalise the stored groups of ``obs`` with the current statistics."""
        return {g: norm(obs[g]) for g, norm in self.normalizers.items()}

    @staticmethod
    @torch.no_grad()
    def polyak(target: nn.Module, online: nn.Module, tau: float) -> None:
        """``target <- (1 - tau) * target + tau * online`` over all parameters (one foreach lerp)."""
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)

    # --- the Agent interface -----------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> torch.Tensor:
        """Env actions ``[N, A]``: :meth:`deterministic_action`, else :meth:`execute` of uniform random actions
        during warm-up, then of :meth:`explore`."""
        x = self.normalizers["policy"](obs["policy"])
        if deterministic:
            return self.to_env_action(self.deterministic_action(x))
        source = self.random_action if self.env_steps < self.cfg.learning_starts else self.explore
        return self.to_env_action(self.execute(x, source))

    @torch.no_grad()
    def observe(self, obs: Obs, action: torch.Tensor, step: Any) -> None:
        """Store the transition of the stored groups with its true next observation (``final_obs`` where done)."""
        done = step.terminated | step.truncated
        next_obs = ReplayBuffer.true_next_obs({g: step.obs[g] for g in self.buffer.observation_dims},
                                              step.info["final_obs"], done)
        self.on_step(obs, step, done)
        self.buffer.add(obs, self.from_env_action(action), step.reward, next_obs, step.terminated, step.truncated)
        for g, norm in self.normalizers.items():
            if isinstance(norm, EmpiricalNormalizer):
                norm.update(obs[g])
        self.env_steps += self.env.num_envs
        if self.env_steps >= self.cfg.learning_starts:
            self.update_credit += self.env.num_envs * self.cfg.utd_ratio

    def ready(self) -> bool:
        """True past warm-up with at least one update owed."""
        return self.env_steps >= self.cfg.learning_starts and self.update_credit >= 1.0 and len(self.buffer) > 0

    def iteration_done(self, collected: int, updated: bool, final: bool) -> bool:
        """An iteration is ``iteration_steps`` transitions (at least one vector step; an agent may update after
        every vector step), and the run's last steps are one too."""
        return final or collected >= max(self.cfg.iteration_steps, self.env.num_envs)

    def use_demos(self, root: str, fraction: float, only_success: bool, prime: bool) -> None:
        """Compose the demos at ``root`` (a ``robot-rl record`` dataset) as :attr:`demo_source`: ``fraction`` of every
        batch, in this agent's action box and stored groups; ``prime`` folds their observations into the
        normalisers (not when a BC start-up froze them)."""
        self.demo_source = DemoSource(root, self.buffer.observation_dims, self.env.action_dim, self.from_env_action,
                                      fraction, only_success, self.device)
        if prime:
            self.demo_source.prime(self.normalizers)

    def demo_rows(self, batch_size: int) -> int:
        """How many of ``batch_size`` rows of a :meth:`sample_batch` batch are demo rows (they come first)."""
        return self.demo_source.rows(batch_size) if self.demo_source is not None else 0

    def draw(self, buffer: ReplayBuffer, n: int) -> Any:
        """``n`` samples of ``buffer`` (raw observations): n-step transitions (a
        :class:`~robot_rl.data.replay_buffer.ReplayBatch`). Agents learning from other samples (chunks) override it."""
        return buffer.sample(n, n_step=self.cfg.n_step, gamma=self.cfg.gamma)

    def sample_batch(self) -> Any:
        """One training batch of ``batch_size`` :meth:`draw` samples, :meth:`demo_rows` of them from the demos first
        (with :attr:`demo_source`), observations normalised. :meth:`update` calls it once per gradient update."""
        B = self.cfg.batch_size
        if self.demo_source is None:
            batch = self.draw(self.buffer, B)
        else:
            batch = self.demo_source.sample(self.draw, self.buffer, B)
        batch.obs, batch.next_obs = self.normalize(batch.obs), self.normalize(batch.next_obs)
        return batch

    def update(self) -> dict[str, float | torch.Tensor]:
        """Run the updates owed by the UTD ratio; returns metrics averaged over them.

        Tensor metrics of :meth:`learn` stay on the device: summed as 0-d float64 tensors (the same sums as
        Python floats would give), converted by the runner's logger once per log interval, not per update.
        """
        count = int(self.update_credit)
        self.update_credit -= count
        sums: Metrics = {}
        for _ in range(count):
            batch = self.sample_batch()
            with self.autocast():
                add_metrics(sums, self.learn(batch))
            self.updates += 1
        metrics = mean_metrics(sums, count)
        metrics["train/updates"] = float(self.updates)
        return metrics

    def networks(self) -> dict[str, nn.Module]:
        """Networks saved in :meth:`state_dict` (subclasses add their own, e.g. target actors)."""
        return {"actor": self.actor, "critic": self.critic, "normalizers": self.normalizers}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Optimisers saved in :meth:`state_dict` (subclasses add theirs)."""
        return {"critic_optimizer": self.critic_optimizer}

    def state_dict(self) -> dict[str, Any]:
        """Networks, critic target, optimisers, counters, (optionally) the replay buffer, and the demos' path and
        size (never their data)."""
        state: dict[str, Any] = {k: m.state_dict() for k, m in self.networks().items()}
        state.update({k: o.state_dict() for k, o in self.optimizers().items()})
        state["critic_target"] = self.critic.target_state_dict()
        state["counters"] = {"env_steps": self.env_steps, "updates": self.updates, "credit": self.update_credit}
        if self.cfg.checkpoint_buffer:
            state["buffer"] = self.buffer.state_dict()
        if self.demo_source is not None:
            state["demos"] = self.demo_source.state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the buffer too, when it was saved); with demos, the demo partition must hold
        as many transitions as when the checkpoint was written."""
        if self.demo_source is not None:
            self.demo_source.check_resume(state.get("demos"))
        for k, m in self.networks().items():
            m.load_state_dict(state[k])
        for k, o in self.optimizers().items():
            o.load_state_dict(state[k])
        self.critic.load_target_state_dict(state["critic_target"])
        counters = state["counters"]
        self.env_steps, self.updates = int(counters["env_steps"]), int(counters["updates"])
        self.update_credit = float(counters["credit"])
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])

    def export_actor(self) -> nn.Module:
        """A detached copy of the deployed network: normalised policy obs ``[B, D]`` -> ``[B, H*A]`` in ``[-1, 1]``
        (``H`` of :meth:`policy_chunking`). Default: the actor."""
        return copy.deepcopy(self.actor)

    def policy(self) -> nn.Module:
        """A detached copy: raw policy obs ``[B, D]`` -> env actions ``[B, H*A]`` (deterministic; ``H = 1``
        unless :meth:`policy_chunking` says otherwise)."""
        H = self.policy_chunking()[0]
        return ExportedPolicy(copy.deepcopy(self.normalizers["policy"]), self.export_actor(),
                              self.low.repeat(H), self.high.repeat(H)).eval()
