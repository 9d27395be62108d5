"""Environment for rclpy from the ``ros-kilted-*`` PyPI wheels (no system ROS install needed).

The wheels ship their C libraries in ``site-packages/ros_*.libs``. Importing rclpy needs them on
``LD_LIBRARY_PATH`` *before* Python starts; the ``ros-wheels-bootstrapper`` wheel does this by
re-executing every interpreter of the environment once (a ``.pth`` hook, guarded by
``_ROS_WHEELS_BOOTSTRAP_COMPLETE``). Child processes started with :func:`ros_environment` get the
final environment directly, so they start once, and are isolated:

* ``ROS_DOMAIN_ID`` separates parallel tests (DDS ports differ per domain);
* ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` keeps discovery on loopback;
* ``RMW_IMPLEMENTATION=rmw_fastrtps_cpp`` is the RMW the ``[ros]`` extra installs.

Standard library only: usable from tests, the CLI and benchmarks without importing rclpy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from robot_rl.errors import InputError

RMW = "rmw_fastrtps_cpp"


def ros_library_dirs() -> list[str]:
    """Directories holding the wheels' shared libraries (``sys.prefix/lib`` and ``ros_*.libs``)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sys.prefix, "lib", version, "site-packages")
    return [str(Path(sys.prefix, "lib")), *sorted(str(p) for p in site.glob("ros_*.libs") if p.is_dir())]


DOMAIN_ID_RANGES = ((0, 101), (215, 232))
"""ROS_DOMAIN_IDs usable on Linux with the default DDS ports (docs.ros.org, Concepts, "The ROS_DOMAIN_ID"):
232 is the highest id whose ports fit in 16 bits, and the ids 102..214 put participant ports in the
kernel's ephemeral port range 32768-60999, where they can collide with other programs' sockets."""


def check_domain_id(domain_id: int) -> int:
    """``domain_id`` if it is in :data:`DOMAIN_ID_RANGES`, else an InputError naming the rule."""
    if isinstance(domain_id, bool) or not isinstance(domain_id, int) or not any(
            lo <= domain_id <= hi for lo, hi in DOMAIN_ID_RANGES):
        raise InputError("outside the ids ROS 2 can use on Linux with the default ports (0..101, or 215..232; "
                         "102..214 collide with the kernel's ephemeral ports 32768-60999, above 232 the DDS "
                         "port numbers overflow)", key="ROS_DOMAIN_ID (--domain-id)", value=domain_id,
                         fix="pick a free id in 0..101")
    return domain_id


def ros_environment(domain_id: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) ready to run rclpy nodes in ``domain_id``.

    Args:
        domain_id: in :data:`DOMAIN_ID_RANGES` (else InputError).
    """
    check_domain_id(domain_id)
    env = dict(os.environ if base is None else base)
    current = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys([*ros_library_dirs(), *current]))
    env["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] = "1"
    env["ROS_DOMAIN_ID"] = str(domain_id)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("RMW_IMPLEMENTATION", RMW)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def ros_nodes_path() -> Path:
    """The ``ros_nodes`` source directory (added to ``PYTHONPATH`` when the package is not installed)."""
    return Path(__file__).resolve().parents[2] / "ros_nodes"
