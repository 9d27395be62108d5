"""Robots: ``hardware/<robot>/robot.yaml`` descriptions and the simulation models built from them."""

from sim.robots.config import (
    ControlSpec,
    JointSpec,
    RobotConfig,
    RobotConfigError,
    SafetySpec,
    hardware_dir,
    load_robot,
)
from sim.robots.model import add_floor_and_light, build_model, build_spec, load_spec, site_name

__all__ = [
    "ControlSpec",
    "JointSpec",
    "RobotConfig",
    "RobotConfigError",
    "SafetySpec",
    "add_floor_and_light",
    "build_model",
    "build_spec",
    "hardware_dir",
    "load_robot",
    "load_spec",
    "site_name",
]
