"""Where the LeRobot v3.0 fixtures (datasets written by LeRobot 0.6.1 itself) live.

They ship with the repository in ``tests/fixtures/lerobot_v3`` (see its README for provenance), so a
bare clone runs the compatibility tests. ``ROBOT_RL_FIXTURES`` may point at another folder holding a
``lerobot_v3`` subfolder (e.g. the shared fixtures, with held-out datasets).
"""

from __future__ import annotations

import os
from pathlib import Path

FIXTURES = Path(os.environ.get("ROBOT_RL_FIXTURES", Path(__file__).resolve().parent / "fixtures"))
LEROBOT_V3 = FIXTURES / "lerobot_v3"
REACH_TINY = LEROBOT_V3 / "so101_reach_tiny"
LANG_TINY = LEROBOT_V3 / "so101_lang_tiny"
