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

RMW = "rmw_fastrtps_cpp"


def ros_library_dirs() -> list[str]:
    """Directories holding the wheels' shared libraries (``sys.prefix/lib`` and ``ros_*.libs``)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sys.prefix, "lib", version, "site-packages")
    return [str(Path(sys.prefix, "lib")), *sorted(str(p) for p in site.glob("ros_*.libs") if p.is_dir())]


def ros_environment(domain_id: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) ready to run rclpy nodes in ``domain_id``.

    Args:
        domain_id: 0..101 (the portable ROS_DOMAIN_ID range on Linux).
    """
    if not 0 <= domain_id <= 101:
        raise ValueError(f"ROS_DOMAIN_ID {domain_id} is outside 0..101; pick a free id in that range.")
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
