"""Unitree G1 tasks (g1_stand, g1_walk, g1_reach_walk) on real MuJoCo: physics sanity, rewards, commands.

The contract tests (tests/test_vecenv_contract.py) cover shapes, determinism and auto-reset for these
tasks too; this file checks what is specific to the humanoid.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

import sim
from robot_rl.deploy.observation import RobotState, build_observation
from robot_rl.export import make_meta
from sim.math import quat_rotate
from sim.randomization import DomainRandCfg
from sim.render import render_frame
from sim.tasks import g1_terms
from sim.tasks.g1_locomotion import FOOT_BODIES, add_floor_and_feet, geom_bottom
from sim.tasks.g1_reach_walk import hand_in_base

QUIET = {"init_joint_noise": 0.0, "randomization": DomainRandCfg(), "observation_noise": False}
"""Overrides for exact checks: no initial-pose noise, no domain randomisation, no sensor noise."""


def _zero(env: sim.VecEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.action_dim)


def _term(env: sim.VecEnv, obs: torch.Tensor, group: str, name: str) -> torch.Tensor:
    """Columns of observation term ``name`` in ``obs`` ``[N, D]`` of ``group``, from the layout."""
    start = 0
    for term, size, _ in env.observation_layout[group]:
        if term == name:
            return obs[:, start:start + size]
        start += size
    raise KeyError(name)


@pytest.fixture(scope="module")
def walk():
    env = sim.make_env("g1_walk", num_envs=4, seed=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def reach():
    env = sim.make_env("g1_reach_walk", num_envs=3, seed=0)
    yield env
    env.close()


# ------------------------------------------------------------------ pure math, hand-computed


def test_exp_kernel_hand_values():
    got = g1_terms.exp_kernel(torch.tensor([0.0, 0.25, 0.5]), sigma=0.25)
    torch.testing.assert_close(got, torch.tensor([1.0, math.exp(-1.0), math.exp(-2.0)]))


def test_air_time_swing_then_touchdown():
    """One foot (dt 0.1): on the floor, 3 steps in the air, then lands; the other stays down."""
    air = torch.zeros(1, 2)
    touchdowns = []
    for left_down in [True, False, False, False, True, True]:
        contact = torch.tensor([[left_down, True]])
        air, first, touchdown = g1_terms.step_air_time(air, contact, dt=0.1)
        touchdowns.append((first[0, 0].item(), round(touchdown[0, 0].item(), 6), round(air[0, 0].item(), 6)))
    assert touchdowns == [(False, 0.0, 0.0), (False, 0.0, 0.1), (False, 0.0, 0.2), (False, 0.0, 0.3),
                          (True, 0.4, 0.0), (False, 0.0, 0.0)]


def test_air_time_reward_hand_values():
    touchdown = torch.tensor([[0.6, 0.0], [0.2, 0.5], [0.6, 0.0]])
    first = torch.tensor([[True, False], [True, True], [True, False]])
    moving = torch.tensor([True, True, False])
    got = g1_terms.air_time_reward(touchdown, first, threshold=0.4, moving=moving)
    torch.testing.assert_close(got, torch.tensor([0.2, (0.2 - 0.4) + (0.5 - 0.4), 0.0]))


def test_geom_bottom_of_tilted_shapes():
    """Box, cylinder and capsule tilted 90 degrees about x, centres at z = 1: bottoms by hand."""
    spec = mujoco.MjSpec()
    quat = [math.cos(math.pi / 4), math.sin(math.pi / 4), 0, 0]
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.1, 0.2, 0.3], pos=[0, 0, 1], quat=quat)
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_CYLINDER, size=[0.1, 0.4, 0], pos=[0, 0, 1], quat=quat)
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_CAPSULE, size=[0.1, 0.4, 0], pos=[0, 0, 1])
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    bottoms = [geom_bottom(model, data, g) for g in range(3)]
    # box: its local y (0.2) now points along world z; cylinder lies on its side (radius 0.1);
    # the upright capsule reaches half-length 0.4 plus radius 0.1 down.
    np.testing.assert_allclose(bottoms, [0.8, 0.9, 0.5], atol=1e-9)


# ------------------------------------------------------------------ physics sanity


def test_reset_stands_on_the_floor():
    """At reset the lowest foot spheres just touch the floor and the base is upright at the standing height."""
    env = sim.make_env("g1_stand", num_envs=2, seed=0, **QUIET)
    obs = env.reset(seed=0)
    soles = g1_terms.foot_heights(env)
    torch.testing.assert_close(soles, torch.zeros(2, 2), atol=1e-4, rtol=0)
    assert 0.75 < env.standing_height < 0.82
    torch.testing.assert_close(env.state.qpos[:, 2], torch.full((2,), env.standing_height), atol=1e-5, rtol=0)
    layout = dict((name, size) for name, size, _ in env.observation_layout["policy"])
    assert list(layout) == ["base_ang_vel", "projected_gravity", "velocity_command", "joint_pos", "joint_vel",
                            "last_action"]
    gravity = _term(env, obs["policy"], "policy", "projected_gravity")
    torch.testing.assert_close(gravity, torch.tensor([[0.0, 0.0, -1.0]] * 2))
    env.close()


def _gantry(spec: mujoco.MjSpec) -> None:
    """The robot hung by its pelvis (a weld to the world at the 0.7842 m standing height), floor 30 cm lower."""
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], pos=[0, 0, -0.3])
    add_floor_and_feet(spec)
    weld = spec.add_equality(type=mujoco.mjtEq.mjEQ_WELD, objtype=mujoco.mjtObj.mjOBJ_BODY,
                             name1="pelvis", name2="world")
    weld.data[:11] = [0, 0, 0, 0, 0, -0.7842, 1, 0, 0, 0, 1]  # anchor, world pose in pelvis frame, torquescale


def test_default_pose_holds_under_pd_for_2s_on_a_gantry():
    """Zero action = default-pose targets: the yaml PD gains hold all 29 joints against gravity."""
    env = sim.make_env("g1_stand", num_envs=2, seed=0, scene=_gantry, **QUIET)
    env.reset(seed=0)
    worst = 0.0
    for _ in range(round(2.0 / env.dt)):
        step = env.step(_zero(env))
        assert not step.done.any()
        worst = max(worst, (env.state.joint_pos - env.default_joint_pos).abs().max().item())
    assert worst < 0.06, f"a joint sagged {worst:.3f} rad from the default pose"
    assert torch.all((env.state.qpos[:, 2] - env.standing_height).abs() < 0.005), "the weld holds the start pose"
    assert env.state.joint_vel.abs().max() < 0.02, "joints still moving after 2 s"
    assert torch.all(env.state.joint_pos >= env.joint_lower) and torch.all(env.state.joint_pos <= env.joint_upper)
    env.close()


def test_on_the_floor_without_a_policy_it_stands_then_falls_and_terminates():
    """Standing open-loop on the floor: the G1 is an inverted pendulum whose ankle gains (2 x 40 N m/rad)
    are below m g L (about 240 N m/rad), with the CoM 4 cm ahead of the ankles, so with zero action it
    stays up for a while, then tips forward. The fall must end the episode as a termination (not a
    truncation) and the env must restart standing."""
    env = sim.make_env("g1_stand", num_envs=2, seed=0, **QUIET)
    env.reset(seed=0)
    h0 = env.standing_height
    steps = 0
    while True:
        step = env.step(_zero(env))
        steps += 1
        if steps <= round(0.5 / env.dt):
            assert not step.done.any()
            assert torch.all((env.state.qpos[:, 2] - h0).abs() < 0.02)
        if step.done.any():
            break
        assert steps < round(2.5 / env.dt), "expected the open-loop G1 to fall within 2.5 s"
    assert step.terminated.all() and not step.truncated.any()
    fallen = _term(env, step.info["final_obs"]["critic"], "critic", "base_height")
    assert torch.all(fallen < h0 - 0.1), "final_obs holds the fallen state"
    torch.testing.assert_close(env.state.qpos[:, 2], torch.full((2,), h0), atol=1e-5, rtol=0)
    env.close()


def test_random_actions_no_nans_and_joint_limits(walk):
    walk.reset(seed=3)
    g = torch.Generator().manual_seed(0)
    lower, upper = walk.joint_lower - 0.02, walk.joint_upper + 0.02
    for _ in range(60):
        step = walk.step(torch.rand(walk.num_envs, walk.action_dim, generator=g) * 2 - 1)
        for group, value in step.obs.items():
            assert torch.isfinite(value).all(), group
        assert torch.isfinite(step.reward).all()
        q = walk.state.joint_pos
        assert torch.all(q >= lower) and torch.all(q <= upper), "a joint left its limits"


def _mujoco_foot_contacts(env, data: mujoco.MjData, i: int) -> list[bool]:
    """Whether MuJoCo's own collision detection (mj_forward on env ``i``'s qpos) finds each foot touching."""
    data.qpos[:] = env.backend.batch.bind("qpos")[i]
    mujoco.mj_forward(env.model, data)
    feet = [env.model.body(b).id for b in FOOT_BODIES.values()]
    touching = [False, False]
    for c in data.contact[: data.ncon]:
        for geom in (c.geom1, c.geom2):
            if env.model.geom_bodyid[geom] in feet:
                touching[feet.index(env.model.geom_bodyid[geom])] = True
    return touching


def test_contact_proxy_agrees_with_mujoco_contacts(walk):
    """The height proxy against the contacts mj_forward detects, under random actions (feet lift, tilt, land)."""
    walk.reset(seed=5)
    g = torch.Generator().manual_seed(5)
    proxy, truth = [], []
    data = mujoco.MjData(walk.model)
    for _ in range(20):
        step = walk.step(torch.rand(walk.num_envs, walk.action_dim, generator=g) * 2 - 1)
        for i in (~step.done).nonzero().squeeze(1).tolist():
            proxy += walk.foot_contact[i].tolist()
            truth += _mujoco_foot_contacts(walk, data, i)
    assert 0 < sum(truth) < len(truth), "the rollout should have both stance and swing feet"
    agreement = np.mean(np.array(proxy) == np.array(truth))
    assert agreement >= 0.99, f"contact proxy agrees with MuJoCo on {agreement:.1%} of foot-steps"


# ------------------------------------------------------------------ rewards and commands


def _check_groups(env: sim.VecEnv, step: sim.Step) -> None:
    terms = step.info["reward_terms"]
    torch.testing.assert_close(torch.stack(list(terms.values())).sum(0), step.reward)
    for column, group in enumerate(env.reward_groups):
        names = [n for n, t in env.cfg.rewards.items() if t.group == group]
        expected = torch.stack([terms[n] for n in names]).sum(0)
        torch.testing.assert_close(step.info["reward_by_group"][:, column], expected)


def test_reward_terms_sum_and_group_columns(walk, reach):
    assert walk.reward_groups == ("locomotion", "posture")
    assert reach.reward_groups == ("locomotion", "manipulation")
    for env in (walk, reach):
        env.reset(seed=1)
        for _ in range(3):
            _check_groups(env, env.step(_zero(env)))


def test_walk_commands_in_range_resampled_and_observed():
    env = sim.make_env("g1_walk", num_envs=64, seed=2, command_resample_s=0.1, standing_fraction=0.25, **QUIET)
    obs = env.reset(seed=2)
    low = torch.tensor([r[0] for r in env.cfg.params["command_ranges"]])
    high = torch.tensor([r[1] for r in env.cfg.params["command_ranges"]])
    first = env.command.clone()
    assert torch.all(first >= low) and torch.all(first <= high)
    standing = (first == 0).all(dim=1).float().mean().item()
    assert 0.05 < standing < 0.5, f"standing fraction {standing} far from 0.25"
    torch.testing.assert_close(_term(env, obs["policy"], "policy", "velocity_command"), first)
    steps = round(0.1 / env.dt)
    for _ in range(steps - 1):
        env.step(_zero(env))
    assert torch.equal(env.command, first), "command changed before command_resample_s"
    step = env.step(_zero(env))
    alive = ~step.done
    assert not torch.equal(env.command[alive], first[alive]), "command not resampled after command_resample_s"
    torch.testing.assert_close(_term(env, step.obs["policy"], "policy", "velocity_command"), env.command)
    env.close()


def test_stand_commands_are_zero_and_tracking_is_near_one_at_rest():
    env = sim.make_env("g1_stand", num_envs=2, seed=0, **QUIET)
    env.reset(seed=0)
    step = env.step(_zero(env))
    assert torch.count_nonzero(env.command) == 0
    assert torch.all(step.info["reward_terms"]["track_lin_vel_xy"] > 0.95)
    assert torch.all(step.info["reward_terms"]["feet_air_time"] == 0)
    env.close()


def test_bad_command_ranges_are_refused():
    with pytest.raises(ValueError, match=r"command_ranges=.*low <= high"):
        sim.make_env("g1_walk", command_ranges=((1.0, -1.0), (0.0, 0.0), (0.0, 0.0)))


# ------------------------------------------------------------------ g1_reach_walk


def test_reach_target_in_base_frame_and_success(reach):
    obs = reach.reset(seed=0)
    torch.testing.assert_close(_term(reach, obs["policy"], "policy", "target_pos"), reach.target)
    box = torch.tensor(reach.cfg.params["target_box"])
    assert torch.all(reach.target >= box[:, 0]) and torch.all(reach.target <= box[:, 1])
    reach.step(_zero(reach))
    reach.target[:] = hand_in_base(reach)
    reach.target[1, 0] += 0.1  # env 1 stays 10 cm away
    reach.target[2, 2] += 0.03  # env 2 is 3 cm away: inside the 5 cm success radius
    step = reach.step(_zero(reach))
    assert step.info["success"].tolist() == [True, False, True]
    fine = step.info["reward_terms"]["reach_fine"]
    assert fine[0] > fine[2] > fine[1]


def test_narrow_target_box_is_refused():
    with pytest.raises(ValueError, match="target_box"):
        sim.make_env("g1_reach_walk", target_box=((2.0, 2.1), (0.0, 0.1), (0.0, 0.1)))


@pytest.mark.render
def test_reach_render_shows_the_target_where_the_policy_sees_it(reach):
    """The marker is drawn at base + R(base) * target, so moving the target changes the frame."""
    reach.reset(seed=0)
    reach.step(_zero(reach))
    before = reach.render(0, width=96, height=72)
    marker = reach.backend.batch.bind("mocap_pos")[0, 0]
    expected = reach.state.qpos[0, 0:3] + quat_rotate(reach.state.qpos[0:1, 3:7], reach.target[0:1])[0]
    np.testing.assert_allclose(marker, expected.numpy(), atol=1e-5)
    reach.target[0] += torch.tensor([0.0, 0.3, 0.0])
    after = reach.render(0, width=96, height=72)
    assert before.shape == (72, 96, 3) and before.std() > 5.0
    assert np.abs(before.astype(int) - after.astype(int)).sum() > 0


@pytest.mark.render
def test_g1_render_camera_follows_the_pelvis(walk):
    """Moved 5 m away, the robot leaves the fixed default view but stays in the frame of env.render."""
    walk.reset(seed=0)
    here = walk.render(0, width=96, height=72).astype(int)
    walk.backend.batch.bind("qpos")[0, 0] += 5.0
    there = walk.render(0, width=96, height=72).astype(int)
    model, data = walk.backend.snapshot(0)
    empty = render_frame(model, data, 96, 72).astype(int)  # fixed camera: the robot is out of view
    robot_here = np.abs(here - empty).sum(axis=2) > 40
    robot_there = np.abs(there - empty).sum(axis=2) > 40
    assert robot_here.sum() > 100
    assert (robot_here & robot_there).sum() / (robot_here | robot_there).sum() > 0.6
    walk.reset(seed=0)


def test_policy_observation_matches_the_deploy_builder_fed_by_mujoco_sensors():
    """The sim's policy observation equals what robot_rl.deploy rebuilds from the robot's messages:
    JointState, the IMU's orientation and gyro (the MJCF's own imu_quat / imu_gyro sensors), the
    /cmd_vel command and the /hand_target position, term by term in the exported layout."""
    env = sim.make_env("g1_reach_walk", num_envs=2, seed=4, **QUIET)
    env.reset(seed=4)
    g = torch.Generator().manual_seed(4)
    for _ in range(10):
        step = env.step((torch.rand(2, env.action_dim, generator=g) * 2 - 1) * 0.3)
    assert not step.done.any()
    meta = make_meta(env.robot.name, env.robot.joint_names, env.default_joint_pos.tolist(),
                     env.observation_layout["policy"], env.robot.control.action_scale, env.robot.control.policy_hz)
    for i in range(2):
        _, data = env.backend.snapshot(i)
        state = RobotState(
            joint_pos=env.state.joint_pos[i].double().numpy(),
            joint_vel=env.state.joint_vel[i].double().numpy(),
            imu_quat_wxyz=data.sensor("imu_quat").data.copy(),
            imu_gyro=data.sensor("imu_gyro").data.copy(),
            velocity_command=env.command[i].double().numpy(),
            target_pos=env.target[i].double().numpy(),
        )
        assert np.abs(state.imu_gyro).max() > 1e-2 and np.abs(state.imu_quat_wxyz[1:]).max() > 1e-3  # moving
        rebuilt = build_observation(meta, state, env.action[i].double().numpy())
        np.testing.assert_allclose(rebuilt, step.obs["policy"][i].numpy(), atol=1e-4)


def test_terminated_state_scores_falls_of_physics_run_elsewhere():
    """``TaskEnv.terminated_state`` (the ROS simulated robot's fall check): the task's own terminations on a
    state loaded from outside, hand-made states: upright at the reset, base at 0.2 m (below fall_height 0.45),
    upright height but tilted 90 degrees about x (cos 0 < fall_tilt_cos 0.5)."""
    env = sim.make_env("g1_stand", num_envs=1)
    env.reset()
    _, data = env.mujoco_view(0)
    upright, qvel = data.qpos.copy(), data.qvel.copy()
    low = upright.copy()
    low[2] = 0.2
    tilted = upright.copy()
    tilted[3:7] = [math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0]
    states = np.stack([upright, low, tilted])
    ended = [bool(env.terminated_state(q[None], qvel[None])[0]) for q in states]
    assert ended == [False, True, True]
    reach = sim.make_env("so101_reach", num_envs=1)  # no terminations: never ended
    _, arm = reach.mujoco_view(0)
    assert not reach.terminated_state(arm.qpos[None], arm.qvel[None]).any()


def test_locomotion_reports_survival_not_success(walk):
    """g1_walk has no success rule (evaluation reports no success rate) and ends episodes by falls (survival)."""
    assert walk.has_success is False and walk.has_terminations is True
    reach = sim.make_env("so101_reach", num_envs=1)
    assert reach.has_success is True and reach.has_terminations is False  # a reach only times out


def test_the_g1_stand_push_recipe_builds_the_stepping_rate_limited_task():
    """recipe=g1_stand_push: g1_stand_gait with the gait clock paid 1.0, joint targets limited to 0.3 rad per tick,
    actions of 1 rad, PPO, a 100 min cap (configs/recipe/g1_stand_push.yaml)."""
    from robot_rl.compose import compose
    from robot_rl.train.runner import sim_env_factory

    cfg = compose(["recipe=g1_stand_push"])
    assert (cfg.task.name, type(cfg.agent).__name__, cfg.max_train_s, cfg.eval_episodes) == (
        "g1_stand_gait", "PPOConfig", 6000, 100)
    env = sim_env_factory(cfg)(2, 0)
    assert env.cfg.rewards["gait_contact"].weight == 1.0 and env.cfg.rewards["feet_swing_height"].weight == -20.0
    assert env.max_step_change == 0.3 and env.cfg.control["action_scale"] == 1.0
    before = env.applied_ctrl.clone()
    env.step(torch.ones(2, env.action_dim))  # the largest step the policy can ask for: the limit binds at 0.3 rad
    assert abs((env.applied_ctrl - before).abs().max() - 0.3) <= 1e-6
