"""The batched environment contract (DESIGN.md, contract 1).

Every environment the agents see — our MuJoCo tasks, the gymnasium adapter, a future MuJoCo Warp
or Isaac Lab backend — implements :class:`VecEnv`. Shapes use ``N = num_envs``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch

from sim.errors import SimInputError

Obs = dict[str, torch.Tensor]
"""Observation groups: ``{"policy": [N, D_policy], "critic": [N, D_critic], ...}``."""


@dataclass
class Step:
    """What :meth:`VecEnv.step` returns.

    Attributes:
        obs: observation groups after the step; rows of done envs are already post-reset.
        reward: ``[N]`` float32, the weighted sum of ``info["reward_terms"]``.
        terminated: ``[N]`` bool, the episode ended in a terminal state (no bootstrap).
        truncated: ``[N]`` bool, the time limit was hit (critics bootstrap through it).
        info: always ``final_obs`` (pre-reset obs of every group, valid where done),
            ``reward_terms`` (``{name: [N]}``, weighted), ``reward_by_group`` (``[N, G]``),
            ``success`` (``[N]`` bool, where the task defines success) and ``log``
            (``{name: float}`` statistics of the episodes that ended in this step).
    """

    obs: Obs
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    info: dict = field(default_factory=dict)

    @property
    def done(self) -> torch.Tensor:
        """``[N]`` bool: terminated or truncated."""
        return self.terminated | self.truncated


class VecEnv(abc.ABC):
    """A batch of ``num_envs`` environments stepped together, tensors in and out.

    Subclasses set the attributes below in ``__init__``.
    """

    num_envs: int
    device: torch.device
    dt: float
    """Control period in seconds (physics dt x decimation)."""
    max_episode_steps: int
    action_dim: int
    action_low: torch.Tensor
    """``[action_dim]`` lower bound of the policy action."""
    action_high: torch.Tensor
    """``[action_dim]`` upper bound of the policy action."""
    observation_dims: dict[str, int]
    """Size of each observation group; ``"policy"`` is always present."""
    reward_groups: tuple[str, ...]
    """Names of the columns of ``info["reward_by_group"]``."""
    has_expert: bool = False
    """Whether the task declares a scripted expert (:meth:`expert_action`)."""
    has_success: bool = True
    """Whether the task defines success, i.e. whether ``info["success"]`` means anything (a locomotion task without a
    success rule reports all False): evaluation and the progress line report a success rate only where it does."""
    has_terminations: bool = True
    """Whether an episode can end before its time limit by a termination (a fall): evaluation reports survival
    (episodes that ran to the time limit) only where it can."""
    cameras: tuple[str, ...] = ()
    """Cameras :meth:`camera_images` renders (the task's ``cameras`` setting)."""
    image_size: int = 0
    """Side (pixels) of the square images :meth:`camera_images` renders; 0 without cameras."""
    has_instructions: bool = False
    """Whether each env carries a language instruction (:meth:`instructions`; the language tasks)."""

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; with a seed, make all later randomness reproducible.

        Returns:
            Observation groups, each ``[num_envs, dim]`` on ``device``.
        """

    @abc.abstractmethod
    def step(self, action: torch.Tensor) -> Step:
        """Advance every env by one control period.

        Args:
            action: ``[num_envs, action_dim]``, clipped to ``[action_low, action_high]``.
        """

    def expert_action(self) -> torch.Tensor:
        """``[N, action_dim]`` the task's scripted expert's action for the current state of every env.

        Experts read the state (targets, object poses) and change nothing; the action follows from the
        state alone, so an expert can take over at any step. Tasks with one set :attr:`has_expert`.
        """
        raise SimInputError(f"task {type(self).__name__} has no scripted expert; record a trained policy instead "
                            "(robot-rl record --policy <artifact dir>)")

    def instructions(self, shift: int = 0) -> list[str]:
        """The instruction of every env's current episode (``num_envs`` strings); tasks with them set
        :attr:`has_instructions`. ``shift`` != 0 names target ``(named + shift) mod K`` instead, in the same
        paraphrase (a wrong instruction, for the language-matters control of VLA evaluation)."""
        raise SimInputError(f"task {type(self).__name__} has no language instructions")

    def instruction_targets(self) -> list[str]:
        """The target each env's current instruction names (``num_envs`` names, e.g. colours)."""
        raise SimInputError(f"task {type(self).__name__} has no language instructions")

    def instruction_table(self) -> list[str]:
        """Every instruction string the task draws from (all targets, all paraphrases)."""
        raise SimInputError(f"task {type(self).__name__} has no language instructions")

    def camera_images(self, env_ids=None) -> dict[str, torch.Tensor]:
        """``{camera: uint8 [n, 3, H, W]}`` rendered now for envs ``env_ids`` (None: all), for tasks built with
        cameras."""
        raise SimInputError(f"task {type(self).__name__} renders no camera images")

    def world_cameras(self) -> tuple[str, ...]:
        """The cameras fixed in the world that :meth:`image_position` projects to (none by default)."""
        return ()

    def image_position(self, points: torch.Tensor, camera: str) -> torch.Tensor:
        """``[n, 2]``: where world points ``[n, 3]`` (env frame) appear in world camera ``camera``'s image, x to the
        right and y down in [-1, 1] inside the frame (NaN behind it); tasks with :meth:`world_cameras`."""
        raise SimInputError(f"task {type(self).__name__} has no world-fixed camera")

    def site_positions(self, joint_positions: torch.Tensor, role: str) -> torch.Tensor:
        """``[n, 3]`` world positions of site ``role`` with the robot's joints at ``joint_positions [n, J]`` (forward
        kinematics); tasks on a MuJoCo model."""
        raise SimInputError(f"task {type(self).__name__} has no forward kinematics")

    def joint_positions(self) -> torch.Tensor:
        """``[N, J]`` the robot's joint positions now (robot units, robot.yaml order, noise-free): what a
        recorded dataset stores as ``observation.state``."""
        raise SimInputError(f"task {type(self).__name__} does not expose joint positions")

    def close(self) -> None:  # noqa: B027 - optional hook, most envs hold nothing to release
        """Release resources (threads, renderers)."""

    def render(self, env_index: int = 0, width: int = 320, height: int = 240):  # pragma: no cover
        """RGB frame ``[height, width, 3]`` uint8 of one env, where the backend can render."""
        raise NotImplementedError(f"{type(self).__name__} cannot render")
