"""Demonstration jobs: record in sim (scripted experts, policies, keyboard teleop), replay, and their ROS launch.

Imports only downward (``sim``, ``robot_rl.data``, ``robot_rl.deploy``); only ``robot_rl.commands`` and
benchmarks import it. Scripted experts belong to their tasks in ``sim`` (``env.expert_action()``), the
ROS frame/replay helpers the nodes use to ``robot_rl.deploy``, dataset conversions to ``robot_rl.data``.

- :mod:`robot_rl.demos.sim_io`     what a sim demo stores, and the env state going in and out of it.
- :mod:`robot_rl.demos.recorder`   roll out an expert (or any ``obs -> action`` policy) in a batched
  sim env and write every finished episode to a LeRobot v3.0 dataset, optionally with a camera.
- :mod:`robot_rl.demos.replay`     restore a recorded episode's initial sim state, replay its actions
  open-loop, report per-joint tracking error and success, and write a side-by-side video.
- :mod:`robot_rl.demos.teleop`     keyboard teleoperation in sim; :mod:`robot_rl.demos.ros_teleop` over ROS.
- :mod:`robot_rl.demos.ros_launch` start the recorder/replay/sim-robot nodes for ``robot-rl record|replay --ros``.

``bc.py`` (behaviour cloning) is moving to ``robot_rl/agents/``; until then the agents import it.
"""
