"""Shared pytest setup: robot assets and offscreen rendering for every test.

``ROBOT_RL_ASSETS`` defaults to ``../shared/robots`` beside the repository (as in CI). Rendering
picks its own GL backend (sim.render); tests marked ``render`` skip, naming the package to install,
on a machine with no display and no headless GL library.
Every test must leave the runner at the scheduling policy it started with: node processes the later
tests start inherit it (SVT-AV1 video encoding once left the runner at SCHED_FIFO 99, as root).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

_SHARED_ROBOTS = Path(__file__).resolve().parents[2] / "shared" / "robots"
if "ROBOT_RL_ASSETS" not in os.environ and _SHARED_ROBOTS.is_dir():
    os.environ["ROBOT_RL_ASSETS"] = str(_SHARED_ROBOTS)
pytest_plugins = ["pytester"]  # tests of this suite's own guards

_POLICIES = {getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
             if hasattr(os, n)}


def _scheduling() -> tuple[int, int] | None:
    """(policy, priority) of this thread; None where the OS has no such call (not Linux)."""
    if not hasattr(os, "sched_getscheduler"):
        return None
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


_RUNNER_SCHEDULING = _scheduling()


@pytest.fixture(autouse=True)
def _runner_keeps_its_scheduling(request):
    """Fail (and undo) a test that leaves the runner at another scheduling policy than it started with."""
    yield
    now = _scheduling()
    if now == _RUNNER_SCHEDULING:
        return
    os.sched_setscheduler(0, _RUNNER_SCHEDULING[0], os.sched_param(_RUNNER_SCHEDULING[1]))
    pytest.fail(f"{request.node.nodeid} left this test process at scheduling policy {_POLICIES.get(now[0], now[0])} "
                f"priority {now[1]} (it started at {_POLICIES.get(_RUNNER_SCHEDULING[0])} priority "
                f"{_RUNNER_SCHEDULING[1]}; restored): set real-time scheduling in a child process, or restore the "
                "policy in the test", pytrace=False)


@pytest.fixture
def one_thread():
    """One torch intra-op thread for the test (tiny networks on a shared 2-core machine: faster and fairer).

    Use it module-wide with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def small_vla_artifact(tmp_path_factory):
    """``(policy, artifact dir, meta)``: tests/vla_small.py's small untrained VLA exported once per session (~40-50 s
    of ONNX export) for tests/test_export_vla.py and the fuzz cases of kind ``vla_artifact``; never modify it (copy
    it first)."""
    from vla_small import export, small_policy

    policy = small_policy()
    out, meta = export(policy, tmp_path_factory.mktemp("small_vla") / "policy")
    return policy, out, meta


_ASSET_ROBOTS = {"franka_panda": "panda|franka", "unitree_g1": "g1|unitree"}
"""Robots whose models are not in the repository (ROBOT_RL_ASSETS), and the words that name them in a test id."""


def _missing_asset_robots() -> dict[str, str]:
    """``{robot: why}`` for each robot of :data:`_ASSET_ROBOTS` whose model no source resolves here."""
    from sim.robots import load_robot
    from sim.robots.config import RobotConfigError
    from sim.robots.model import load_spec

    missing = {}
    for name in _ASSET_ROBOTS:
        try:
            load_spec(load_robot(name))
        except RobotConfigError as exc:
            missing[name] = str(exc)
    return missing


def _needs(item: pytest.Item, robot: str) -> bool:
    marker = item.get_closest_marker("robot_assets")
    if marker is not None:
        return robot in marker.args
    return re.search(rf"(^|[^a-z0-9])({_ASSET_ROBOTS[robot]})", item.nodeid.lower()) is not None


def pytest_collection_modifyitems(config, items):
    """Skip, with the reason and the fix, tests whose data is not on this machine.

    - ``render`` tests where no GL backend can render (the reason names the Debian packages);
    - tests of the Panda and the G1 (named in the test id, or marked ``robot_assets("unitree_g1")``)
      where their models are missing: they are not redistributed here, ROBOT_RL_ASSETS points at them;
    - ``warp`` tests where MuJoCo Warp (the ``[gpu]`` extra) is not installed.
    """
    if importlib.util.find_spec("mujoco_warp") is None:
        for item in items:
            if item.get_closest_marker("warp"):
                item.add_marker(pytest.mark.skip(reason="needs MuJoCo Warp, the [gpu] extra: pip install -e .[gpu]"))
    render_items = [item for item in items if item.get_closest_marker("render")]
    if render_items:
        from sim.render import gl_backend

        try:
            gl_backend()
        except RuntimeError as exc:
            for item in render_items:
                item.add_marker(pytest.mark.skip(reason=str(exc)))
    missing = _missing_asset_robots()
    for robot in missing:
        reason = (f"needs the {robot} model, which is not in the repository: set ROBOT_RL_ASSETS to a folder "
                  f"holding {robot}/ (in this workspace ../shared/robots) or pip install mujoco-menagerie")
        for item in items:
            if _needs(item, robot):
                item.add_marker(pytest.mark.skip(reason=reason))
