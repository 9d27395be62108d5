"""so101_lift on real MuJoCo: scene, observations, sparse/shaped rewards, success, and the scripted expert."""

from __future__ import annotations

import math

import mujoco
import pytest
import torch

import sim
from sim.errors import SimInputError
from sim.math import clip_norm, dls_step
from sim.tasks import so101_lift
from sim.tasks.so101_lift import scripted_expert, wrap_quarter_turn


@pytest.fixture(scope="module")
def env():
    environment = sim.make_env("so101_lift", num_envs=4, seed=3)
    environment.reset(seed=3)
    yield environment
    environment.close()


# ------------------------------------------------------------------ pure math


def test_wrap_quarter_turn_hand_values():
    angles = torch.tensor([0.0, 0.5, math.pi / 2, 1.0 + math.pi, -0.9, math.pi / 4 + 0.01])
    expected = torch.tensor([0.0, 0.5, 0.0, 1.0 - math.pi / 2, -0.9 + math.pi / 2, -math.pi / 4 + 0.01])
    torch.testing.assert_close(wrap_quarter_turn(angles), expected, atol=1e-6, rtol=0)


def test_dls_step_hand_values():
    # J = diag(2, 1), e = (1, 1), damping 1: dq = J^T (J J^T + I)^-1 e = (2/5, 1/2)
    jac = torch.tensor([[[2.0, 0.0], [0.0, 1.0]]])
    dq = dls_step(jac, torch.tensor([[1.0, 1.0]]), damping=1.0)
    torch.testing.assert_close(dq, torch.tensor([[0.4, 0.5]]))
    # without damping on a square invertible J it is the exact inverse
    torch.testing.assert_close(dls_step(jac, torch.tensor([[2.0, 3.0]]), damping=0.0), torch.tensor([[1.0, 3.0]]))


def test_clip_norm_hand_values():
    out = clip_norm(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8], [0.3, 0.4]]))


# ------------------------------------------------------------------ scene and observations


def test_cube_spawns_in_range_on_the_floor(env):
    p = env.cfg.params
    cube = so101_lift.cube_pos_world(env)
    (cx, cy), (hx, hy) = p["cube_spawn_center"], p["cube_spawn_half_extent"]
    assert torch.all((cube[:, 0] - cx).abs() <= hx) and torch.all((cube[:, 1] - cy).abs() <= hy)
    torch.testing.assert_close(cube[:, 2], torch.full((4,), p["cube_half_size"]), atol=1e-3, rtol=0)
    assert len({round(x, 4) for x in cube[:, 0].tolist()}) == 4, "positions are randomised per env"


def test_observation_layout_and_base_frame_cube(env):
    names = [name for name, _, _ in env.observation_layout["policy"]]
    assert names == ["joint_pos", "joint_vel", "last_action", "cube_pos"]
    critic = [name for name, _, _ in env.observation_layout["critic"]]
    assert {"cube_quat", "cube_lin_vel", "cube_ang_vel", "gripper_to_cube"} <= set(critic)
    assert env.observation_dims["policy"] == 6 + 6 + 6 + 3
    torch.testing.assert_close(so101_lift.cube_pos(env), so101_lift.cube_pos_world(env) - env.state.site("base"))


def test_jaw_hulls_replaced_by_boxes(env):
    model = env.model
    for body in (so101_lift.GRIPPER, so101_lift.JAW):
        body_id = model.body(body).id
        boxes = [g for g in range(model.ngeom) if model.geom_bodyid[g] == body_id and model.geom(g).name.startswith(
            f"{body}_box")]
        assert len(boxes) >= 5 and all(model.geom_contype[g] for g in boxes)
    jaw_meshes = (so101_lift.JAW, so101_lift.FIXED_JAW_MESH)
    for g in range(model.ngeom):
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH and model.mesh(model.geom_dataid[g]).name in jaw_meshes:
            assert model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0


# ------------------------------------------------------------------ rewards and success


def test_sparse_reward_is_zero_without_success(env):
    env.reset(seed=4)
    for _ in range(5):
        step = env.step(torch.zeros(4, env.action_dim))
        assert set(step.info["reward_terms"]) == {"success"}
        assert torch.all(step.reward == 0.0) and not step.info["success"].any()


def test_flung_cube_is_not_a_success(env):
    """A cube 6 cm up but away from the gripper is not lifted."""
    env.reset(seed=5)
    snapshot = env.capture_state()
    snapshot.physics["qpos"][:, env.cube_qpos + 2] += 0.06
    snapshot.physics["qvel"][:] = 0.0
    env.restore_state(snapshot)
    assert torch.all(so101_lift.lift_gain(env) > 0.05)
    assert not so101_lift.lifted(env).any()


def test_expert_succeeds_and_success_terminates():
    """The scripted expert lifts the cube in most episodes (measured 63/64 at 64 envs, seed 1)."""
    env = sim.make_env("so101_lift", num_envs=6, seed=0)
    env.reset(seed=0)
    succeeded = torch.zeros(6, dtype=torch.bool)
    finished = torch.zeros(6, dtype=torch.bool)
    for _ in range(60):
        step = env.step(scripted_expert(env))
        fresh = step.done & ~finished
        torch.testing.assert_close(step.reward, step.info["success"].float())
        assert torch.equal(step.terminated, step.info["success"])
        succeeded |= fresh & step.info["success"]
        finished |= step.done
    assert succeeded.sum() >= 5, f"expert succeeded in {int(succeeded.sum())}/6 episodes"


def test_hold_steps_delay_success_and_shaped_terms():
    env = sim.make_env("so101_lift_shaped", num_envs=2, seed=0, hold_steps=5, success_terminates=False)
    env.reset(seed=0)
    assert set(env.cfg.rewards) == {"success", "reach", "grasp", "lift", "action_rate"}
    lifted_run, saw_grasp, saw_lift = torch.zeros(2, dtype=torch.long), False, False
    for _ in range(60):
        step = env.step(scripted_expert(env))
        lifted = so101_lift.lifted(env)
        lifted_run = torch.where(lifted, lifted_run + 1, torch.zeros_like(lifted_run))
        assert torch.equal(step.info["success"], lifted_run >= 5)
        terms = step.info["reward_terms"]
        assert torch.all((terms["reach"] > 0) & (terms["reach"] <= 0.1))
        saw_grasp |= bool((terms["grasp"] > 0).any())
        saw_lift |= bool((terms["lift"] > 0.4).any())
    assert saw_grasp and saw_lift and step.info["success"].all()


def test_expert_actions_replay_exactly():
    """The expert's Jacobian queries leave the physics untouched: its actions replayed open-loop in a
    fresh env with the same seed give the same trajectory (what demo replay relies on)."""
    actions, states = [], []
    for replay in (False, True):
        env = sim.make_env("so101_lift", num_envs=2, seed=0, success_terminates=False)
        env.reset(seed=0)
        for i in range(30):
            if not replay:
                actions.append(scripted_expert(env))
            env.step(actions[i])
        states.append(env.state.qpos.clone())
    torch.testing.assert_close(states[0], states[1], rtol=0, atol=0)
    assert so101_lift.lift_gain(env).max() > 0.01, "the replayed expert never lifted a cube"


def test_score_state_replays_the_tasks_success_and_terms():
    """A second env fed the first one's physics (as the ROS simulated robot does) scores the same success each step;
    term_value gives the noise-free cube position the deployed policy observes."""
    played = sim.make_env("so101_lift", num_envs=1, seed=0, hold_steps=3, success_terminates=False)
    scorer = sim.make_env("so101_lift", num_envs=1, seed=9, hold_steps=3, success_terminates=False)
    played.reset(seed=0)
    scorer.reset(seed=9)
    successes = []
    for _ in range(60):
        step = played.step(scripted_expert(played))
        physics = played.capture_state().physics
        scored = scorer.score_state(physics["qpos"], physics["qvel"])
        assert torch.equal(scored, step.info["success"])
        torch.testing.assert_close(scorer.term_value("cube_pos"), so101_lift.cube_pos(played))
        successes.append(bool(scored))
    assert any(successes) and not successes[0], successes  # the hold counter starts at 0 and is reached
    with pytest.raises(SimInputError, match="no observation term 'nope'"):
        scorer.term_value("nope")


def test_deployed_observation_rebuilds_the_policy_group():
    """robot_rl.deploy's observation from what ROS carries (joints, last action, cube pose) = the env's policy obs."""
    import numpy as np

    from robot_rl.deploy.observation import RobotState, build_observation
    from robot_rl.export import make_meta

    env = sim.make_env("so101_lift", num_envs=1, seed=2, observation_noise=False)
    env.reset(seed=2)
    for _ in range(8):
        step = env.step(scripted_expert(env))
    meta = make_meta(env.robot.name, env.robot.joint_names, env.default_joint_pos.tolist(),
                     env.observation_layout["policy"], env.robot.control.action_scale, env.robot.control.policy_hz)
    state = RobotState(joint_pos=env.state.joint_pos[0].double().numpy(),
                       joint_vel=env.state.joint_vel[0].double().numpy(),
                       cube_pos=env.term_value("cube_pos")[0].double().numpy())
    rebuilt = build_observation(meta, state, env.action[0].double().numpy())
    np.testing.assert_allclose(rebuilt, step.obs["policy"][0].numpy(), atol=1e-5)
