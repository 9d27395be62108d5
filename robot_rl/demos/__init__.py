"""Demonstrations in sim: scripted experts, recording to LeRobot datasets, open-loop replay.

- :mod:`robot_rl.demos.experts`  batched scripted experts per task (``so101_reach``, ``so101_lift``).
- :mod:`robot_rl.demos.recorder` roll out an expert (or any ``obs -> action`` policy) in a batched
  sim env and write every finished episode to a LeRobot v3.0 dataset, optionally with a camera.
- :mod:`robot_rl.demos.replay`   restore a recorded episode's initial sim state, replay its actions
  open-loop, report per-joint tracking error and success, and write a side-by-side video.
"""
