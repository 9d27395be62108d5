"""Resolve a robot's MJCF offline and rebuild it for simulation from its robot.yaml.

Whatever actuators the source model declares (the G1 model ships torque motors), the compiled
model has exactly one actuator per yaml joint, in yaml order: a PD position servo with the yaml's
``kp``/``kd`` and effort limit, or a torque motor when ``control.action_type`` is ``joint_torque``.
PD control therefore runs inside MuJoCo at the physics rate; Python only writes targets.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Callable
from pathlib import Path

import mujoco

from sim.robots.config import RobotConfig, RobotConfigError

SpecEdit = Callable[[mujoco.MjSpec], None]

# Contact bits for collision: floor_only. Robot geoms collide with the world, never with each other.
_ROBOT_CONTYPE, _ROBOT_CONAFFINITY = 2, 1
_WORLD_CONTYPE, _WORLD_CONAFFINITY = 1, 2


def _package_source(spec: str) -> Path | None:
    package, _, rel = spec.partition(":")
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        return None
    path = Path(str(root.joinpath(rel)))
    return path if path.is_file() else None


def _assets_source(rel: str) -> Path | None:
    root = os.environ.get("ROBOT_RL_ASSETS")
    if not root:
        return None
    path = Path(root) / rel
    return path if path.is_file() else None


def _menagerie_spec(name: str) -> mujoco.MjSpec | None:
    try:
        import mujoco_menagerie
    except ModuleNotFoundError:
        return None
    robot, _, entry = name.partition("/")
    return mujoco_menagerie.get(robot).spec(entry or None)


def load_spec(robot: RobotConfig) -> tuple[mujoco.MjSpec, str]:
    """The first model source of ``robot`` that resolves, as an editable spec, and its description.

    Raises:
        RobotConfigError: no source resolves; the message lists what was tried and how to fix it.
    """
    tried = []
    for source in robot.model.sources:
        (kind, value), = source.items()
        if kind == "package":
            path = _package_source(value)
        elif kind == "assets":
            path = _assets_source(value)
        elif kind == "path":
            path = (robot.path.parent / value).resolve()
            path = path if path.is_file() else None
        else:
            spec = _menagerie_spec(value)
            if spec is not None:
                return spec, f"menagerie:{value}"
            tried.append(f"menagerie:{value} (pip install mujoco-menagerie; needs network once)")
            continue
        if path is not None:
            return mujoco.MjSpec.from_file(str(path)), str(path)
        hint = {"package": "pip install the package that ships it",
                "assets": f"set ROBOT_RL_ASSETS (now {os.environ.get('ROBOT_RL_ASSETS')!r}) to a "
                          "directory holding it, e.g. ../shared/robots",
                "path": "fix the path, relative to the robot.yaml"}[kind]
        tried.append(f"{kind}:{value} ({hint})")
    raise RobotConfigError(f"{robot.path}: key 'model.sources': no model found for robot "
                           f"{robot.name!r}; tried " + "; ".join(tried) + ". Fix: make one of these "
                           "sources resolve, or add a source that does")


def _rebuild_actuators(spec: mujoco.MjSpec, robot: RobotConfig) -> None:
    for actuator in list(spec.actuators):
        spec.delete(actuator)
    model_joints = {j.name for j in spec.joints}
    for i, joint in enumerate(robot.joints):
        if joint.name not in model_joints:
            raise RobotConfigError(
                f"{robot.path}: key 'joints[{i}].name': joint {joint.name!r} is not in the model. "
                f"Fix: use one of {sorted(model_joints)}")
        actuator = spec.add_actuator(name=joint.name, target=joint.name)
        actuator.trntype = mujoco.mjtTrn.mjTRN_JOINT
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-joint.effort, joint.effort]
        if robot.control.action_type == "joint_torque":
            actuator.set_to_motor()
            actuator.ctrlrange = [-joint.effort, joint.effort]
        else:
            actuator.set_to_position(kp=joint.kp, kv=joint.kd)
            actuator.ctrlrange = [joint.lower, joint.upper]
        actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE


def _add_sites(spec: mujoco.MjSpec, robot: RobotConfig) -> None:
    existing = {s.name for s in spec.sites}
    for role, site in robot.sites.items():
        if isinstance(site, str):
            if site not in existing:
                raise RobotConfigError(f"{robot.path}: key 'sites.{role}': site {site!r} is not in the "
                                       f"model. Fix: use one of {sorted(existing)} or {{body, pos}}")
            continue
        body = spec.body(site.get("body", ""))
        if body is None:
            raise RobotConfigError(f"{robot.path}: key 'sites.{role}.body': no body "
                                   f"{site.get('body')!r} in the model. Fix: name an existing body")
        body.add_site(name=role, pos=list(site.get("pos", [0.0, 0.0, 0.0])))


def site_name(robot: RobotConfig, role: str) -> str:
    """MJCF name of the site playing ``role`` (``end_effector``, ``imu``, ``left_hand``...)."""
    site = robot.sites.get(role)
    if site is None:
        raise RobotConfigError(f"{robot.path}: key 'sites.{role}': missing. Fix: add the site this task needs")
    return site if isinstance(site, str) else role


def build_spec(robot: RobotConfig, edit: SpecEdit | None = None) -> mujoco.MjSpec:
    """The robot's spec prepared for simulation, then edited by ``edit`` (a task's scene)."""
    spec, _ = load_spec(robot)
    spec.option.timestep = robot.control.physics_dt
    _rebuild_actuators(spec, robot)
    _add_sites(spec, robot)
    if edit is not None:
        edit(spec)
    if robot.model.collision == "floor_only":
        for geom in spec.geoms:
            if geom.contype == 0 and geom.conaffinity == 0:
                continue
            world = geom.parent.name == "world"
            geom.contype = _WORLD_CONTYPE if world else _ROBOT_CONTYPE
            geom.conaffinity = _WORLD_CONAFFINITY if world else _ROBOT_CONAFFINITY
    return spec


def build_model(robot: RobotConfig, edit: SpecEdit | None = None) -> mujoco.MjModel:
    """Compile the simulation model of ``robot`` (see :func:`build_spec`)."""
    return build_spec(robot, edit).compile()


def add_floor_and_light(spec: mujoco.MjSpec) -> None:
    """Add a ground plane and a light when the model has none (scene-less robot files)."""
    if not any(g.type == mujoco.mjtGeom.mjGEOM_PLANE for g in spec.geoms):
        spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
                                rgba=[0.35, 0.4, 0.45, 1.0])
    if not spec.lights:
        spec.worldbody.add_light(pos=[0, 0, 3.0], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
