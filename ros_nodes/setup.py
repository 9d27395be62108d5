"""ament_python build of the ros_nodes package (``colcon build --packages-select ros_nodes``)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "ros_nodes"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.*")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="robot_rl developers",
    maintainer_email="robot-rl@example.com",
    description="robot_rl deployment: policy runner, safety layer, simulated robot, launch files.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "policy_node = ros_nodes.policy_node:main",
            "sim_robot_node = ros_nodes.sim_robot_node:main",
            "recorder_node = ros_nodes.recorder_node:main",
            "replay_node = ros_nodes.replay_node:main",
        ],
    },
)
