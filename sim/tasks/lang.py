"""What the language tasks share: coloured objects, instruction tables, cameras, per-target success.

A language task puts several objects of distinct colours in the scene and names one of them in a
natural-language instruction drawn at every reset (the colour, in one of a few paraphrases). The
env keeps ``target_id [N]`` (index into :attr:`InstructionSet.targets`, the named object) and
``paraphrase_id [N]``; :meth:`InstructedTask.instructions` returns the strings, the critic gets
``target_id`` one-hot (:func:`target_one_hot`), and the episode log splits success by target
(``episode/success/<colour>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from sim.errors import SimInputError

COLOURS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.9, 0.1, 0.1, 1.0),
    "green": (0.1, 0.75, 0.2, 1.0),
    "blue": (0.15, 0.3, 0.95, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
}
"""Target names (colours) in the order of ``target_id``, with their RGBA."""

FixedCamera = tuple[str, tuple[float, float, float], tuple[float, float, float], float]
"""A world camera: (name, position, point looked at, vertical field of view in degrees); metres."""

FRONT_CAMERA: FixedCamera = ("front", (0.45, 0.0, 0.3), (0.17, 0.0, 0.05), 50.0)
"""World camera of the language scenes, close over the floor in front of the robot (so101_pick_lang's cubes)."""
WRIST_CAMERA = ("wrist", "gripper", (0.04, 0.0, -0.06), (-0.8, 0.0, -1.0))
"""Camera on the gripper: (name, body, position in the body frame, viewing direction in the body frame;
the SO-101 gripper's -z runs along the fingers and +x points up at the default pose)."""


def _look_at_axes(direction: np.ndarray, up: np.ndarray) -> np.ndarray:
    """MuJoCo ``xyaxes`` ``[6]`` of a camera looking along ``direction`` ``[3]`` with ``up`` ``[3]`` upward."""
    forward = direction / np.linalg.norm(direction)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    return np.concatenate([right, np.cross(right, forward)])


def add_cameras(spec: mujoco.MjSpec, fixed: tuple[FixedCamera, ...] = (FRONT_CAMERA,)) -> None:
    """Add the ``fixed`` world cameras (default :data:`FRONT_CAMERA`) and :data:`WRIST_CAMERA` on the gripper."""
    for name, pos, look, fovy in fixed:
        axes = _look_at_axes(np.subtract(look, pos), np.array([0.0, 0.0, 1.0]))
        spec.worldbody.add_camera(name=name, pos=list(pos), xyaxes=axes.tolist(), fovy=fovy)
    name, body, pos, direction = WRIST_CAMERA
    axes = _look_at_axes(np.array(direction), np.array([1.0, 0.0, 0.0]))
    spec.body(body).add_camera(name=name, pos=list(pos), xyaxes=axes.tolist(), fovy=70.0)


@dataclass(frozen=True)
class InstructionSet:
    """The instructions of a language task: each template names a target with ``{target}``.

    ``text(k, p)`` is target ``k`` in paraphrase ``p``; :meth:`parse` maps any text naming exactly one
    target (whole word, any case) back to its index.
    """

    targets: tuple[str, ...]
    templates: tuple[str, ...]

    def text(self, target: int, paraphrase: int) -> str:
        """The instruction naming ``targets[target]`` in template ``paraphrase``."""
        return self.templates[paraphrase].format(target=self.targets[target])

    def table(self) -> dict[str, int]:
        """Every instruction string -> the index of the target it names (target-major order)."""
        return {self.text(k, p): k for k in range(len(self.targets)) for p in range(len(self.templates))}

    def parse(self, text: str) -> int:
        """Index of the one target ``text`` names.

        Raises:
            SimInputError: ``text`` names no target or several.
        """
        words = set(re.findall(r"[a-z]+", text.lower()))
        named = [k for k, target in enumerate(self.targets) if target in words]
        if len(named) != 1:
            raise SimInputError(f"instruction {text!r} names {len(named)} of the targets {list(self.targets)}; "
                                f"name exactly one, e.g. {self.text(0, 0)!r}")
        return named[0]


def target_one_hot(env) -> torch.Tensor:
    """``[N, K]`` one-hot of the named target (privileged: the policy reads it from the instruction)."""
    return torch.nn.functional.one_hot(env.target_id, len(env.instruction_set.targets)).float()


def draw_separated(env, table: torch.Tensor, count: int, n: int, min_distance: float,
                   tries: int = 100) -> torch.Tensor:
    """``[n, count, 3]`` rows of ``table [M, 3]``, redrawn until each is ``min_distance`` from the others
    in x-y (after ``tries`` redraws the last draw stands)."""
    pick = torch.randint(0, len(table), (n, count), generator=env.generator, device=env.device)
    far = torch.eye(count, dtype=torch.bool, device=env.device) * 1e9
    for _ in range(tries):
        points = table[pick][..., :2]
        close = (torch.cdist(points, points) + far < min_distance).any(dim=-1)
        if not close.any():
            break
        redraw = torch.randint(0, len(table), (n, count), generator=env.generator, device=env.device)
        pick = torch.where(close, redraw, pick)
    return table[pick]


class InstructedTask:
    """Mixin of a :class:`sim.env.TaskEnv` whose envs each follow one instruction of ``instruction_set``.

    The env calls :meth:`_draw_instructions` in its ``_reset_task`` and implements
    :meth:`_instruction_changed` (point its named target at ``target_id``). Params read: ``paraphrases``
    (False: always the first template).
    """

    instruction_set: InstructionSet
    has_instructions = True

    def _init_instructions(self) -> None:
        self.target_id = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.paraphrase_id = torch.zeros_like(self.target_id)

    def _draw_instructions(self, ids: torch.Tensor) -> None:
        """A uniform target and paraphrase for envs ``ids``."""
        targets, templates = len(self.instruction_set.targets), len(self.instruction_set.templates)
        self.target_id[ids] = torch.randint(0, targets, (len(ids),), generator=self.generator, device=self.device)
        paraphrases = templates if self.cfg.params["paraphrases"] else 1
        self.paraphrase_id[ids] = torch.randint(0, paraphrases, (len(ids),), generator=self.generator,
                                                device=self.device)

    def _instruction_changed(self, ids: torch.Tensor) -> None:
        """Hook after ``target_id`` of envs ``ids`` changed."""
        raise NotImplementedError

    def named_position(self) -> torch.Tensor:
        """``[N, 3]`` world position of the object each env's instruction names (the recorder stores it per frame
        as ``sim.named_position``: what ``agent.target_keypoint`` of ``agent=vla`` projects into the cameras)."""
        raise NotImplementedError

    def instructions(self, shift: int = 0) -> list[str]:
        """The instruction of every env's current episode (``num_envs`` strings); ``shift`` != 0: the one naming
        target ``(target_id + shift) mod K`` in the same paraphrase."""
        count = len(self.instruction_set.targets)
        return [self.instruction_set.text((int(k) + shift) % count, int(p)) for k, p in
                zip(self.target_id.tolist(), self.paraphrase_id.tolist(), strict=True)]

    def instruction_targets(self) -> list[str]:
        """The target (colour) each env's instruction names."""
        return [self.instruction_set.targets[int(k)] for k in self.target_id.tolist()]

    def instruction_table(self) -> list[str]:
        """Every instruction string of :attr:`instruction_set` (target-major)."""
        return list(self.instruction_set.table())

    def set_instruction(self, text: str, env_ids=None) -> None:
        """Give envs ``env_ids`` (None: all) the instruction ``text`` (any text naming one target).

        Raises:
            SimInputError: ``text`` names no target or several.
        """
        target = self.instruction_set.parse(text)
        index = torch.as_tensor(self._env_ids(env_ids), device=self.device)
        self.target_id[index] = target
        templates = self.instruction_set.templates
        match = [p for p in range(len(templates)) if self.instruction_set.text(target, p) == text]
        self.paraphrase_id[index] = match[0] if match else 0
        self._instruction_changed(index)

    def _episode_log(self, ids: torch.Tensor, success: torch.Tensor) -> dict[str, float]:
        log = super()._episode_log(ids, success)
        for k, name in enumerate(self.instruction_set.targets):
            mask = self.target_id[ids] == k
            if mask.any():
                log[f"episode/success/{name}"] = success[ids][mask].float().mean().item()
        return log
