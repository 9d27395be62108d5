"""ROS 2 nodes of robot_rl: the policy runner with its safety layer and a MuJoCo simulated robot.

Run through ``ros2 launch ros_nodes sim2sim.launch.py`` (or ``.xml``/``.yaml``) on a ROS 2
computer, or ``robot-rl deploy sim2sim`` with the ``ros-kilted-*`` wheels. Nothing imports this
package; the nodes import :mod:`robot_rl.deploy` (numpy + onnxruntime) and, for the simulated
robot only, :mod:`sim`.
"""
