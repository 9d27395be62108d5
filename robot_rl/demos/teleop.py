"""Keyboard teleoperation of a sim robot, recorded like any other demo (:func:`robot_rl.demos.recorder.record`).

Three parts, so the logic is testable without a keyboard:

- :func:`map_key` / :class:`KeyTeleop`: pure mapping from key names to joint-target changes.
  ``joint`` mode: ``q w e r t y u i o`` raise joints 1..9, ``a s d f g h j k l`` lower them.
  ``ee`` mode (arms): arrows move the end effector along base x (up/down) and y (left/right),
  ``w``/``s`` along z, by damped-least-squares IK on the arm joints; ``q``/``a`` open/close the
  gripper joint. Both modes: ``[``/``]`` halve/double the step, ``esc`` ends the session.
- :class:`TerminalKeys`: the device reader, the controlling terminal in cbreak mode (termios +
  select; no extra dependency, works over SSH). No terminal raises :class:`NoKeyboardError`.
- :func:`teleop_policy`: a ``policy(env, obs)`` for the recorder that polls the keys, paces the
  sim at its control rate in wall-clock time and turns the target into the env's action.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable
from typing import Protocol

import numpy as np

JOINT_UP, JOINT_DOWN = "qwertyuio", "asdfghjkl"
EE_KEYS = {"up": (0, 1.0), "down": (0, -1.0), "left": (1, 1.0), "right": (1, -1.0), "w": (2, 1.0), "s": (2, -1.0)}
GRIPPER_KEYS = {"q": 1.0, "a": -1.0}
ESCAPES = {b"\x1b[A": "up", b"\x1b[B": "down", b"\x1b[C": "right", b"\x1b[D": "left"}
NAMED = {b" ": "space", b"\n": "enter", b"\r": "enter", b"\x7f": "backspace", b"\x1b": "esc"}
MODES = ("joint", "ee")


class NoKeyboardError(RuntimeError):
    """No keyboard device to read (not a terminal)."""


class TeleopQuit(Exception):  # noqa: N818 - a request, not an error
    """The operator pressed ``esc``: stop recording (saved episodes stay)."""


def map_key(key: str, mode: str, num_joints: int) -> tuple[str, int, float] | None:
    """``(kind, index, value)`` for one key, or None if the key means nothing in ``mode``.

    Kinds: ``joint`` (joint index, +-1), ``ee`` (axis 0/1/2, +-1), ``gripper`` (-1, +-1),
    ``scale`` (0, 0.5 or 2.0), ``quit``.
    """
    if mode not in MODES:
        raise ValueError(f"teleop mode {mode!r} must be one of {MODES}")
    if key == "esc":
        return ("quit", 0, 0.0)
    if key in ("[", "]"):
        return ("scale", 0, 0.5 if key == "[" else 2.0)
    if mode == "ee":
        if key in EE_KEYS:
            axis, sign = EE_KEYS[key]
            return ("ee", axis, sign)
        if key in GRIPPER_KEYS:
            return ("gripper", -1, GRIPPER_KEYS[key])
        return None
    for sign, row in ((1.0, JOINT_UP), (-1.0, JOINT_DOWN)):
        j = row.find(key) if len(key) == 1 else -1
        if 0 <= j < num_joints:
            return ("joint", j, sign)
    return None


class KeyTeleop:
    """Joint targets ``[A]`` driven by key events (see :func:`map_key`), clamped to the joint limits.

    Args:
        start: ``[A]`` initial target (the robot's pose at the episode start).
        lower, upper: ``[A]`` joint limits (rad).
        mode: ``joint`` or ``ee``.
        joint_step: rad per key press (joint mode and the gripper).
        ee_step: metres per key press (ee mode).
        gripper: index of the gripper joint for ``q``/``a`` in ee mode (None: no gripper).
    """

    def __init__(self, start: np.ndarray, lower: np.ndarray, upper: np.ndarray, mode: str = "joint",
                 joint_step: float = 0.02, ee_step: float = 0.005, gripper: int | None = None) -> None:
        map_key("esc", mode, len(start))  # validates the mode
        self.lower, self.upper, self.mode, self.gripper = lower, upper, mode, gripper
        self.target = np.clip(np.asarray(start, dtype=np.float64), lower, upper)
        self.joint_step, self.ee_step = joint_step, ee_step

    def apply(self, keys: list[str], ik: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """Apply one tick's keys and return the new ``[A]`` target.

        Args:
            ik: ``ik(dx [3] metres) -> dq [A]`` for ee mode (e.g. :func:`ee_ik` of the sim env).

        Raises:
            TeleopQuit: on ``esc`` (after applying the keys before it).
        """
        dx = np.zeros(3)
        for key in keys:
            action = map_key(key, self.mode, len(self.target))
            if action is None:
                continue
            kind, index, value = action
            if kind == "quit":
                raise TeleopQuit
            if kind == "scale":
                self.joint_step *= value
                self.ee_step *= value
            elif kind == "joint":
                self.target[index] += value * self.joint_step
            elif kind == "gripper" and self.gripper is not None:
                self.target[self.gripper] += value * self.joint_step
            elif kind == "ee":
                dx[index] += value * self.ee_step
        if np.any(dx):
            if ik is None:
                raise ValueError("ee mode needs an ik(dx) function")
            self.target = self.target + ik(dx)
        self.target = np.clip(self.target, self.lower, self.upper)
        return self.target.copy()


def decode_keys(data: bytes) -> list[str]:
    """Key names from terminal bytes: arrows (``up``...), ``space``, ``enter``, ``backspace``, ``esc``, characters."""
    keys, i = [], 0
    while i < len(data):
        seq = next((s for s in ESCAPES if data.startswith(s, i)), None)
        if seq is not None:
            keys.append(ESCAPES[seq])
            i += len(seq)
            continue
        byte = data[i : i + 1]
        keys.append(NAMED.get(byte) or byte.decode("latin-1"))
        i += 1
    return keys


class KeySource(Protocol):
    """Anything with ``poll() -> list[str]`` (the keys pressed since the last poll)."""

    def poll(self) -> list[str]: ...


class TerminalKeys:
    """Key presses from a terminal (default: stdin) in cbreak mode; use as a context manager.

    Raises:
        NoKeyboardError: ``fd`` is not a terminal (a pipe, a file, a CI job without a TTY).
    """

    def __init__(self, fd: int | None = None) -> None:
        self.fd = sys.stdin.fileno() if fd is None else fd
        if not os.isatty(self.fd):
            raise NoKeyboardError(
                "no keyboard: standard input is not a terminal, so there are no key presses to read. Run the "
                "command in an interactive terminal (a local shell or `ssh -t`), not from a pipe or a job."
            )
        self._saved: list | None = None

    def __enter__(self) -> TerminalKeys:
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keys arrive one by one, unechoed; Ctrl-C still interrupts
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def poll(self) -> list[str]:
        """The keys typed since the last call (never blocks)."""
        data = b""
        while select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 1024)
            if not chunk:
                break
            data += chunk
        return decode_keys(data)


def ee_ik(env, damping: float = 0.05) -> Callable[[np.ndarray], np.ndarray]:
    """``ik(dx [3]) -> dq [A]`` for env 0 of a sim arm: DLS on the joints other than grippers/fingers."""
    import torch

    from sim.math import dls_step
    from sim.robots import site_name

    names = env.robot.joint_names
    arm = [i for i, n in enumerate(names) if "gripper" not in n and "finger" not in n]
    dofs = [int(env.model.joint(names[i]).dofadr[0]) for i in arm]
    site = site_name(env.robot, "end_effector")
    body = int(env.model.site(site).bodyid[0])

    def ik(dx: np.ndarray) -> np.ndarray:
        jacp, _ = env.jacobian(body, env.state.site("end_effector")[:1], env_ids=[0])
        jac = jacp[:, :, dofs].cpu()
        dq = np.zeros(len(names))
        dq[arm] = dls_step(jac, torch.as_tensor(dx[None], dtype=torch.float64), damping)[0].numpy()
        return dq

    return ik


def teleop_policy(keys: KeySource, mode: str = "joint", realtime: bool = True,
                  status: Callable[[str], None] | None = None):
    """A recorder ``policy(env, obs) -> action [1, A]`` driven by ``keys``.

    At each episode start the target resets to the robot's pose. With ``realtime`` each call waits
    for the next control period of wall-clock time, so the operator sees (and feels) real speed.
    ``status`` receives a one-line summary every step (target, end-effector position).
    """
    import torch

    state: dict[str, object] = {"teleop": None, "ik": None, "next": time.monotonic()}

    def policy(env, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if env.num_envs != 1:
            raise ValueError(f"teleop drives one env; got num_envs={env.num_envs} (use --num-envs 1)")
        teleop = state["teleop"]
        if teleop is None or int(env.episode_step[0]) == 0:
            names = env.robot.joint_names
            gripper = next((i for i, n in enumerate(names) if "gripper" in n or "finger" in n), None)
            teleop = KeyTeleop(env.state.joint_pos[0].cpu().numpy(), env.joint_lower.cpu().numpy(),
                               env.joint_upper.cpu().numpy(), mode, gripper=gripper)
            state["teleop"], state["ik"] = teleop, (ee_ik(env) if mode == "ee" else None)
        if realtime:
            state["next"] = max(state["next"] + env.dt, time.monotonic())
            time.sleep(max(0.0, state["next"] - time.monotonic()))
        target = teleop.apply(keys.poll(), state["ik"])
        if status is not None:
            line = f"step {int(env.episode_step[0]):4d}  target {np.array2string(target, precision=2)}"
            if "end_effector" in env.robot.sites:
                line += f"  ee {np.array2string(env.state.site('end_effector')[0].cpu().numpy(), precision=3)}"
            status(line)
        return env.action_for_targets(torch.as_tensor(target[None], dtype=torch.float32, device=env.device))

    return policy
