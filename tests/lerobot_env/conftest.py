"""Fixtures of the LeRobot layer, shared by its modules: one recorded dataset and one tiny SmolVLA per session.

Imports are inside the fixtures: without lerobot the modules skip themselves and nothing here runs.
"""

import pytest


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    """``(dataset root, policy dir, losses)``: 4 recorded episodes, a SmolVLA trained STEPS steps on them."""
    from tiny_smolvla import CHUNK, STEPS, make_policy_dir

    from robot_rl.demos.recorder import expert_policy, record

    base = tmp_path_factory.mktemp("lerobot")
    record("so101_reach_lang", expert_policy, base / "ds", 4, None, num_envs=4,
           overrides={"cameras": ["front"], "image_size": 64})
    losses = make_policy_dir(base / "ds", base, STEPS, chunk=CHUNK)
    return base / "ds", base / "policy", losses


@pytest.fixture(scope="session")
def spec():
    """The so101 action map (joint targets <-> env action), as export writes it."""
    import sim
    from robot_rl.deploy.actions import robot_action_spec

    env = sim.make_env("so101_reach_lang", 1)
    yield robot_action_spec(env.robot)
    env.close()
