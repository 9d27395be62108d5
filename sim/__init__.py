"""sim: batched robot simulation behind one VecEnv contract. Knows nothing of agents.

    import sim
    env = sim.make_env("so101_reach", num_envs=64, seed=0)
    obs = env.reset()                        # {"policy": [64, D], "critic": [64, Dc]}
    step = env.step(torch.zeros(64, env.action_dim))
"""

import os as _os

# Offscreen rendering without a display or GPU goes through OSMesa. The choice must be made before
# mujoco is first imported (it loads its GL bindings then), so it is made here, before any sim module.
if "MUJOCO_GL" not in _os.environ and not _os.environ.get("DISPLAY"):
    _os.environ["MUJOCO_GL"] = "osmesa"
if _os.environ.get("MUJOCO_GL") == "osmesa":
    _os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from sim.registry import list_tasks, make_env, register_task
from sim.state import SimState
from sim.vecenv import Obs, Step, VecEnv

__all__ = ["Obs", "SimState", "Step", "VecEnv", "list_tasks", "make_env", "register_task"]
