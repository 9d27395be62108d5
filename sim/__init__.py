"""sim: batched robot simulation behind one VecEnv contract. Knows nothing of agents.

    import sim
    env = sim.make_env("so101_reach", num_envs=64, seed=0)
    obs = env.reset()                        # {"policy": [64, D], "critic": [64, Dc]}
    step = env.step(torch.zeros(64, env.action_dim))
"""

# No GL backend is chosen here: only rendering needs one, and sim.render picks it at the first frame.
from sim.registry import list_tasks, make_env, register_task
from sim.state import SimState
from sim.vecenv import Obs, Step, VecEnv

__all__ = ["Obs", "SimState", "Step", "VecEnv", "list_tasks", "make_env", "register_task"]
