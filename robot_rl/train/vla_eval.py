"""A VLA policy played in a batched language task with rendered cameras (:func:`robot_rl.train.evaluation.evaluate`)."""

from __future__ import annotations

from typing import Any

import torch

from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.errors import InputError
from robot_rl.models.chunked_actor import ChunkExecutor
from robot_rl.models.vla.policy import VLAPolicy
from robot_rl.train.evaluation import EnvPlayer


class VLAPlayer(EnvPlayer):
    """A :class:`VLAPolicy` played in a language task, one action ``[N, A]`` per step (:func:`evaluate`).

    Each query reads the camera groups ``obs["camera_<name>"]`` (uint8 ``[N, 3, H, W]``), the envs' instructions
    (``env.instructions(shift)``: ``instruction_shift`` != 0 tells the policy another target's instruction, same
    paraphrase, while the env still scores the named one) and ``env.joint_positions()`` ``[N, S]``; the chunks
    ``[n, H, A]`` are played by a :class:`~robot_rl.models.chunked_actor.ChunkExecutor` with ``execution``, as the
    deployed artifact plays them. Each chunk is decoded from zero noise, as deployed; ``noise_scale`` > 0 decodes it
    from ``N(0, noise_scale^2 I)`` drawn with ``seed`` instead (the sampled policy RL post-training collects with;
    refused for a steered policy, which picks its own noise).
    """

    def __init__(self, policy: VLAPolicy, execution: ChunkExecution, instruction_shift: int = 0,
                 noise_scale: float = 0.0, seed: int = 0) -> None:
        from robot_rl.models.vla.steering import SteeredVLAPolicy

        if noise_scale < 0 or (noise_scale > 0 and isinstance(policy, SteeredVLAPolicy)):
            raise InputError("a sampled-noise evaluation needs a noise scale >= 0 and a VLA that decodes the noise "
                             "it is given (a steered run's actor picks its own)", key="--noise-scale",
                             value=noise_scale, fix="drop --noise-scale for this run, or pass a scale >= 0")
        self.policy, self.execution, self.shift = policy.eval(), execution, instruction_shift
        self.noise_scale = float(noise_scale)
        self.generator = torch.Generator().manual_seed(seed)
        self.executor: ChunkExecutor | None = None

    def act(self, env: Any, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Action ``[N, A]`` for this step of ``env`` (a ``sim.VecEnv`` with instructions and the cameras)."""
        if not env.has_instructions:
            raise InputError("a VLA policy needs a language task (instructions)", key="task.name",
                             fix="evaluate on the task it was trained for, e.g. task=so101_reach_lang")
        texts, state = env.instructions(self.shift), env.joint_positions()
        if self.executor is None:
            ex = self.execution
            self.executor = ChunkExecutor(env.num_envs, self.policy.chunk_len, env.action_dim, ex.mode,
                                          ex.execute_len, ex.ensemble_decay, state.device)

        def chunks(rows: torch.Tensor) -> torch.Tensor:
            noise = None
            if self.noise_scale > 0:
                shape = self.policy.noise_shape(len(rows))
                noise = (self.noise_scale * torch.randn(shape, generator=self.generator)).to(state.device)
            return self.policy.act(self.images(env, obs, rows), [texts[i] for i in rows.tolist()], state[rows],
                                   noise)

        return self.executor.act(torch.arange(env.num_envs, device=state.device), chunks)

    def images(self, env: Any, obs: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{camera: uint8 [n, 3, H, W]}`` of envs ``rows`` ``[n]``: the camera groups of ``obs``, or (an env
        built with ``camera_obs=false``) rendered now by ``env.camera_images``."""
        cams = self.policy.cameras
        if all(f"camera_{c}" in obs for c in cams):
            return {c: obs[f"camera_{c}"][rows] for c in cams}
        rendered = env.camera_images(rows.cpu().numpy()) if env.cameras else {}
        missing = [c for c in cams if c not in rendered]
        if missing:
            raise InputError("the env renders no camera the policy needs", key="task.env.cameras", value=missing,
                             fix=f"task.env.cameras=[{','.join(cams)}]")
        return {c: rendered[c] for c in cams}

    def reset(self, done: torch.Tensor) -> None:
        """Forget the plans of the envs where ``done`` ``[N]`` bool is set."""
        if self.executor is not None:
            self.executor.reset(done)
