"""Simulation backends. ``mujoco_batch``: CPU, ``mujoco.batch.Batch`` (MuJoCo >= 4.0)."""
