"""Policy runner alone, for a real robot whose driver is already up.

    ros2 launch ros_nodes deploy.launch.py robot:=so101 policy:=<artifact> [namespace:=] [use_sim:=false]

Same nodes and arguments as deploy.launch.xml / deploy.launch.yaml. Parameter files come from
`robot-rl ros params <robot>` (installed to share/ros_nodes/config/<robot>.yaml).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

USE_SIM_DEFAULT = "false"


def generate_launch_description() -> LaunchDescription:
    """Arguments robot, policy, namespace, use_sim; nodes sim_robot (if use_sim) and policy_node."""
    robot, policy = LaunchConfiguration("robot"), LaunchConfiguration("policy")
    namespace, use_sim = LaunchConfiguration("namespace"), LaunchConfiguration("use_sim")
    params = PathJoinSubstitution([FindPackageShare("ros_nodes"), "config", [robot, ".yaml"]])
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="so101", description="hardware/<robot>/robot.yaml name"),
        DeclareLaunchArgument("policy", description="policy artifact directory (policy.yaml + policy.onnx)"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of both nodes and topics"),
        DeclareLaunchArgument("use_sim", default_value=USE_SIM_DEFAULT, description="start the MuJoCo robot"),
        Node(package="ros_nodes", executable="sim_robot_node", name="sim_robot", namespace=namespace,
             parameters=[params], condition=IfCondition(use_sim), output="screen"),
        Node(package="ros_nodes", executable="policy_node", name="policy_node", namespace=namespace,
             parameters=[params, {"policy": policy}], output="screen"),
    ])
