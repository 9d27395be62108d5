"""The agent interface runners drive (DESIGN.md, contract 5).

Runners own the loop, logging, checkpoints, evaluation and export; an agent owns

- :meth:`Agent.act` — actions for a batch of observations,
- :meth:`Agent.observe` — record one env step (the agent decides what it keeps),
- :meth:`Agent.update` — learn from what it observed, returning float metrics,
- :meth:`Agent.state_dict` / :meth:`Agent.load_state_dict` — everything needed to resume
  (networks, optimisers, normalisers, counters) as a nested dict of tensors and plain scalars,
- :meth:`Agent.policy` — the deterministic deployable policy (raw obs in, action out) for export.

Agents are registered with :func:`register_agent` under their config key (``agent=ppo``).
"""

from __future__ import annotations

import abc
import contextlib
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from robot_rl.config.registry import Registry
from robot_rl.deploy.artifact import ChunkExecution

Obs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class EnvSpec:
    """What an agent needs to know about the env it trains on (read from a ``sim.VecEnv``).

    Attributes:
        num_envs: ``N``.
        observation_dims: size of each observation group (``"policy"`` always, ``"critic"`` optional).
        action_dim: ``A``.
        action_low, action_high: ``[A]`` action bounds.
        reward_groups: names of the reward groups (``G`` columns of ``reward_by_group``).
        dt: control period in seconds.
        max_episode_steps: time limit of one episode.
        instructions: every instruction string a language task draws (``VecEnv.instruction_table``); empty
            for tasks without instructions.
        world_cameras: the env's world-fixed cameras (``VecEnv.world_cameras``).
        image_position: ``(points [n, 3], camera) -> [n, 2]``, where world points appear in one of those cameras
            (``VecEnv.image_position``); None where the env has no world camera.
        site_positions: ``(joint_positions [n, J], site) -> [n, 3]``, forward kinematics (``VecEnv.site_positions``);
            None where the env has none.
        vla_inputs: ``(rows [n]) -> ({camera: uint8 [n, 3, H, W]}, [n instruction strings], joint positions [n, J])``,
            what a VLA reads of envs ``rows`` now (cameras rendered on the call, the instructions, the joints): for
            agents that act from cameras and instructions while collecting (``agent=vla_rl``); None where the env
            has no instructions or renders no camera.
        image_size: side (pixels) of the square camera images the env renders (``VecEnv.image_size``); 0: none.
        action_for_targets: ``(joint targets [n, A] in rad) -> [n, A]`` the env's action that commands them, clipped
            to the action box (``TaskEnv.action_for_targets``); None where the env has none (torque control).
        target_positions: ``(rows [n]) -> [n, 3]`` the world position of the target of envs ``rows`` now (a language
            task's instructed object, ``VecEnv.get_target``: what a VLA's target keypoint marks), privileged state for
            training only (``agent=vla_ppo agent.keypoint_coef``); None where the task keeps no target.
    """

    num_envs: int
    observation_dims: dict[str, int]
    action_dim: int
    action_low: torch.Tensor
    action_high: torch.Tensor
    reward_groups: tuple[str, ...] = ("total",)
    dt: float = 0.02
    max_episode_steps: int = 1000
    instructions: tuple[str, ...] = ()
    world_cameras: tuple[str, ...] = ()
    image_position: Callable[[torch.Tensor, str], torch.Tensor] | None = None
    site_positions: Callable[[torch.Tensor, str], torch.Tensor] | None = None
    vla_inputs: Callable[[torch.Tensor], tuple[dict[str, torch.Tensor], list[str], torch.Tensor]] | None = None
    image_size: int = 0
    action_for_targets: Callable[[torch.Tensor], torch.Tensor] | None = None
    target_positions: Callable[[torch.Tensor], torch.Tensor] | None = None

    @classmethod
    def from_env(cls, env: Any) -> EnvSpec:
        """Read the spec from a ``sim.VecEnv``."""
        cameras = tuple(env.world_cameras()) if hasattr(env, "world_cameras") else ()
        return cls(
            num_envs=env.num_envs,
            observation_dims=dict(env.observation_dims),
            action_dim=env.action_dim,
            action_low=env.action_low,
            action_high=env.action_high,
            reward_groups=tuple(env.reward_groups),
            dt=float(env.dt),
            max_episode_steps=int(env.max_episode_steps),
            instructions=tuple(env.instruction_table()) if env.has_instructions else (),
            world_cameras=cameras,
            image_position=env.image_position if cameras else None,
            site_positions=getattr(env, "site_positions", None),
            vla_inputs=_vla_inputs(env) if env.has_instructions and getattr(env, "cameras", None) else None,
            image_size=int(getattr(env, "image_size", 0)),
            action_for_targets=_action_for_targets(env),
            target_positions=env.get_target if getattr(env, "has_target", False) else None,
        )

    def image_positions(self, points: dict[str, torch.Tensor], cameras: Sequence[str]) -> torch.Tensor:
        """``[n, C, P, 2]`` where each of the world ``points`` (``{name: [n, 3]}``, in order) appears in each of
        ``cameras``, x right and y down in [-1, 1]; NaN in a camera that is not world-fixed (it moves with the robot).
        """
        n = len(next(iter(points.values())))
        nowhere = torch.full((n, 2), float("nan"))
        return torch.stack([torch.stack([self.image_position(p, cam) if cam in self.world_cameras else nowhere
                                         for p in points.values()], dim=1) for cam in cameras], dim=1)

    @property
    def critic_group(self) -> str:
        """Observation group the critic reads: ``"critic"`` (privileged) when present, else ``"policy"``."""
        return "critic" if "critic" in self.observation_dims else "policy"


def _action_for_targets(env: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """:attr:`EnvSpec.action_for_targets` of ``env``: its ``action_for_targets`` on a position-controlled robot."""
    robot = getattr(env, "robot", None)
    if robot is None or not hasattr(env, "action_for_targets") or robot.control.action_type == "joint_torque":
        return None
    return env.action_for_targets


def _vla_inputs(env: Any) -> Callable[[torch.Tensor], tuple[dict[str, torch.Tensor], list[str], torch.Tensor]]:
    """:attr:`EnvSpec.vla_inputs` of a language task ``env`` with cameras."""
    def inputs(rows: torch.Tensor) -> tuple[dict[str, torch.Tensor], list[str], torch.Tensor]:
        texts = env.instructions()
        return (env.camera_images(rows.cpu().numpy()), [texts[i] for i in rows.tolist()],
                env.joint_positions()[rows.to(env.device)])
    return inputs


_forked = False
"""Whether this process was forked (GNU OpenMP's thread pool does not survive a fork: a forked child that enters a
parallel region with more than one thread, after its parent used one, waits forever)."""


def _mark_forked() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_mark_forked)


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads (0: leave the count alone), then restore the
    previous count (an update may use the cores the simulator leaves idle while it waits). In a forked process
    the count is left alone (see ``_forked``)."""
    before = torch.get_num_threads()
    if threads > 0 and threads != before and not _forked:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def compiled(fn: Callable[..., Any], option: str) -> Callable[..., Any]:
    """``fn`` compiled by ``torch.compile`` (inductor, static shapes), for an agent option named ``option``; ``fn``
    itself, with a warning naming the option and the fix, where no C++ compiler is found (inductor's CPU backend
    builds C++). Turns off the AOTAutograd cache of this process: on torch 2.13 CPU a compile served from it ran
    PPO's update ~25% slower than one recompiled from inductor's (still cached) kernels, 34 vs 27.5 ms."""
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        warnings.warn(f"{option}=true: torch.compile needs a C++ compiler on CPU and {cxx!r} is not on PATH; running "
                      f"uncompiled (slower, same results). Fix: install one (Debian: apt install g++) or set "
                      f"{option}=false", stacklevel=2)
        return fn
    import torch._functorch.config  # the AOTAutograd cache switch, loaded only where compiling

    torch._functorch.config.enable_autograd_cache = False
    return torch.compile(fn, dynamic=False)


@dataclass(frozen=True)
class BasePolicy:
    """A trained run's policy that another agent builds on (:attr:`Agent.base_policy_key`).

    Attributes:
        policy: its deployable policy module (:meth:`Agent.policy`), frozen by the agent that uses it.
        execution: how its chunks are played (:meth:`Agent.policy_chunking`).
        policy_inputs: its :attr:`Agent.policy_inputs`.
        demonstrations: where the run learned from a dataset (``agent=vla``), a loader of it as the run sampled it:
            ``(frozen_head) -> (batches, frame weights or None)`` (``VLAAgent.demonstration_batches``), for an agent
            that keeps the demonstrations in its loop; None otherwise.
    """

    policy: nn.Module
    execution: ChunkExecution
    policy_inputs: str
    demonstrations: Callable[[bool], tuple[Any, torch.Tensor | None]] | None = None


class Agent(abc.ABC):
    """Base class of all agents. Shapes: ``N`` envs, ``A`` action size, ``D`` policy obs size."""

    policy_inputs: str = "policy"
    """What :meth:`policy` reads: ``"policy"``, the raw ``obs["policy"]``; ``"vla"``, a
    :class:`~robot_rl.models.vla.policy.VLAPolicy`'s cameras, instruction and joint positions."""
    offline: bool = False
    """Whether the agent learns from a fixed dataset only (``agent=vla``): the runner then steps no env, calls
    :meth:`update` (one gradient step) :meth:`offline_updates` times and counts its progress, log rows and
    checkpoints in those updates; the env serves the final evaluation only."""
    critic_at_chunk_starts: bool = False
    """Whether :meth:`critic_values` scores whole chunks at the steps where a chunk starts (NaN at the other steps)
    with a value that ends at the episode's time limit (the critic sees the elapsed time): ``agent=vla_rl``.
    ``robot-rl critic-report`` then compares values at chunk starts with complete realised returns
    (:func:`robot_rl.diagnostics.value_traces.collect_chunk_traces`)."""
    base_policy_key: str | None = None
    """The config field naming the run directory of a trained policy this agent builds on (``agent=vla_rl``:
    ``"policy"``, the SFT run it steers). The runner opens that run and hands its :class:`BasePolicy` to the
    constructor as ``base_policy`` (agents do not open runs themselves: that is the train package's job)."""

    dataset_key: str | None = None
    """The config field naming a LeRobot dataset the agent is built from (``agent=vla``: ``"dataset"``; its features
    and task strings fix the model's shapes and tokenizer). A new run keeps a copy of that description
    (``<run>/dataset_meta``), so evaluation and export of the run still open it after the dataset moves
    (:func:`robot_rl.train.run_loading.open_run`)."""

    def __init__(self, cfg: Any, critic_cfg: Any, env: EnvSpec, device: str | torch.device = "cpu") -> None:
        """``critic_cfg`` is only handed to :func:`robot_rl.critics.make_critic` by the agent that builds its critic
        and not kept: what an agent needs of its critic it asks the critic object (``robot_rl/critics/base.py``)."""
        self.cfg = cfg
        self.env = env
        self.device = torch.device(device)

    @abc.abstractmethod
    def act(self, obs: Obs, deterministic: bool = False) -> torch.Tensor:
        """Actions ``[N, A]`` for observation groups ``{"policy": [N, D], ...}``."""

    @abc.abstractmethod
    def observe(self, obs: Obs, action: torch.Tensor, step: Any) -> None:
        """Record the transition ``obs --action--> step`` (a ``sim.Step``; done rows are post-reset,
        ``step.info["final_obs"]`` holds their pre-reset observations)."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether :meth:`update` has enough data (a full rollout, or replay past warm-up)."""

    @abc.abstractmethod
    def update(self) -> dict[str, float | torch.Tensor]:
        """One learning phase; returns scalar metrics (``loss/value``, ``lr``, ...): floats or detached 0-d
        tensors, which the runner's logger turns into floats once per log interval (no device sync per update)."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Nested dict of tensors and plain scalars (int, float, str, bool, None, lists) to resume."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    @abc.abstractmethod
    def networks(self) -> dict[str, nn.Module]:
        """Every module whose parameters or buffers are trained or tracked (data-parallel training
        broadcasts them from rank 0 at start)."""

    @abc.abstractmethod
    def policy(self) -> nn.Module:
        """A standalone deterministic policy: raw ``obs["policy"]`` ``[B, D]`` -> action ``[B, A]`` (a chunk
        ``[B, H*A]`` when :meth:`policy_chunking` says ``H > 1``; :func:`robot_rl.train.evaluation.playable`),
        or a :class:`robot_rl.models.vla.policy.VLAPolicy` (cameras, instruction and joint positions in, a chunk
        ``[B, H, A]`` out; ``agent=vla``).

        Observation normalisation is inside the module; it shares no state with training after
        being returned (a copy), so it can be exported or evaluated while training continues.
        """

    def iteration_done(self, collected: int, updated: bool, final: bool) -> bool:
        """Whether the runner's iteration (one log row, one progress-line update, one count towards
        ``checkpoint_interval``) ends after this vector step (:class:`robot_rl.train.runner.Runner`).

        Args:
            collected: transitions (all envs) collected since the iteration began, this step's included.
            updated: :meth:`update` ran after this step.
            final: the run's ``task.total_steps`` are collected.

        Default (on-policy): every :meth:`update` is one iteration; steps collected after the last one are not logged.
        """
        return updated

    def offline_updates(self) -> int:
        """An :attr:`offline` agent's training length in :meth:`update` calls (online agents: ``task.total_steps``)."""
        raise NotImplementedError(f"{type(self).__name__} learns online, from env steps")

    def policy_chunking(self) -> tuple[int, ChunkExecution]:
        """``(H, execution)``: :meth:`policy` outputs ``H`` actions per query, ``[B, H*A]`` step-major, played one
        per step by a chunk executor with ``execution``. Default: one action per query (``[B, A]``)."""
        return 1, ChunkExecution("open_loop", 1, 0.0)

    def critic_values(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """The agent's critic members ``[E, N, G]`` at raw observation groups ``obs`` (``{"policy": [N, D], ...}``)
        for the env actions ``[N, A]`` taken there (ignored by V critics), converted as the agent feeds its
        critic; ``robot-rl critic-report`` compares them with the realised returns. An agent without a critic
        keeps this refusal."""
        raise NotImplementedError(f"{type(self).__name__} has no critic to evaluate")

    def start_episodes(self) -> None:  # noqa: B027 - optional hook
        """The envs were all reset outside the training loop (``robot-rl critic-report``): drop any per-env state
        of episodes in play (an agent that plays chunks forgets them)."""

    def train_mode(self, training: bool) -> None:  # noqa: B027 - optional hook
        """Switch networks between training and evaluation behaviour (e.g. frozen normalisers)."""


A = TypeVar("A", bound=type[Agent])

_AGENTS: Registry[type[Agent]] = Registry("agent")


def register_agent(key: str, config_cls: type) -> Callable[[A], A]:
    """Class decorator: ``agent=<key>`` builds this class from a ``config_cls`` instance."""
    return _AGENTS.register(key, config_cls)


def agent_keys() -> list[str]:
    """Registered agent keys, sorted."""
    return _AGENTS.keys()


def agent_class(cfg: object) -> type[Agent]:
    """The agent class registered for the config instance ``cfg``."""
    return _AGENTS.class_of(cfg)


def make_agent(cfg: object, critic_cfg: object, env: EnvSpec, device: str | torch.device = "cpu",
               base_policy: BasePolicy | None = None) -> Agent:
    """Build the agent whose registered config type is ``type(cfg)``; ``base_policy`` goes to an agent with a
    :attr:`Agent.base_policy_key` (and only to one)."""
    cls = _AGENTS.class_of(cfg)
    if cls.base_policy_key is None:
        return cls(cfg, critic_cfg, env, device)
    return cls(cfg, critic_cfg, env, device, base_policy=base_policy)
