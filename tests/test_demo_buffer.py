"""The RLPD demo partition holds the transitions the env itself produces (so101_lift, sparse reward).

Each recorded so101_lift expert episode is replayed from its recorded first state with the partition's
actions, and every frame is compared with what the env returns: reward (the success frame carries the
sparse 1), termination, next observation (up to the policy-observation noise), and the agent's action
scaling (the partition's ``[-1, 1]`` action, mapped the way the agent maps its own, gives the recorded
actuator targets).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from expert_demos import record_expert_demos

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.rlpd import RLPDConfig
from robot_rl.critics.layer_norm import LayerNormEnsembleCriticConfig
from robot_rl.data.demo_buffer import demo_replay
from robot_rl.data.lerobot import LeRobotDataset
from robot_rl.demos.sim_io import actuator_targets, restore

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lift_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 successful scripted-expert so101_lift episodes (~20 frames each, each ending in success)."""
    return record_expert_demos(tmp_path_factory.mktemp("demo_buffer") / "lift", "so101_lift", 3, 3, 1,
                               only_success=True)


def test_demo_partition_matches_the_env_step_for_step(lift_demos: Path) -> None:
    env = sim.make_env("so101_lift", num_envs=1)
    spec = EnvSpec.from_env(env)
    agent = make_agent(RLPDConfig(demos=str(lift_demos), critic_obs="policy", batch_size=8, buffer_size=100),
                       LayerNormEnsembleCriticConfig(hidden_dims=[16, 16]), spec)
    demos = agent.demo_source.buffer
    assert demos is not None and len(demos) == agent.demo_transitions
    ds = LeRobotDataset(lift_demos)
    episodes, recorded_targets = ds.column("episode_index"), ds.column("action")
    # the policy observation's uniform noise, per dim: two independent draws differ by at most twice it
    noise = torch.cat([torch.full((size,), term.noise) for (_, size, _), term in
                       zip(env.observation_layout["policy"], env.cfg.observations["policy"].values(), strict=True)])
    assert noise.any()
    reward, terminated = demos.reward[:, 0], demos.terminated[:, 0]
    for e in range(ds.num_episodes):
        rows = np.flatnonzero(episodes == e)
        data = ds.episode(e)
        env.reset(seed=0)
        restore(env, data["sim.qpos"][0], data["sim.qvel"][0])
        for k, t in enumerate(rows):
            action = demos.action[t]  # [1, A] in the agent's normalised box
            env_action = agent.to_env_action(action)  # what the agent would send for it
            np.testing.assert_allclose(actuator_targets(env, env_action)[0].numpy(), recorded_targets[t], atol=1e-5)
            step = env.step(env_action)
            assert float(step.reward[0]) == float(reward[t]), f"episode {e} frame {k}: reward differs from the env's"
            assert bool(step.terminated[0]) == bool(terminated[t]), f"episode {e} frame {k}: termination differs"
            gap = (step.info["final_obs"]["policy"][0] - demos.next_obs["policy"][t, 0]).abs()
            assert (gap <= 2 * noise + 1e-4).all(), f"episode {e} frame {k}: next observation off by {gap.max()}"
            if k + 1 < len(rows):  # within an episode the next frame starts exactly where this one ended (an
                # env that does not reset keeps its final_obs, noise draw included, when another env resets)
                assert torch.equal(demos.obs["policy"][t + 1, 0], demos.next_obs["policy"][t, 0]), (
                    f"episode {e} frame {k}: next frame starts elsewhere")
        # the episode ends on its success frame: reward 1, terminated, no bootstrap from the next episode
        last = rows[-1]
        assert float(reward[last]) == 1.0 and bool(terminated[last]) and float(reward[rows[:-1]].sum()) == 0.0
    batch = demos.sample(256, n_step=1, gamma=0.99)
    assert set(batch.discount[batch.reward > 0].tolist()) == {0.0}  # success frames never bootstrap
    env.close()


def test_demo_partition_refuses_another_task(lift_demos: Path) -> None:
    with pytest.raises(ValueError, match="record the demos on the same task"):
        demo_replay(lift_demos, {"policy": 20}, 6)


def test_critic_warmup_learns_positive_q_on_demo_success_frames(lift_demos: Path) -> None:
    """Demo-only batches, actor frozen: the critic learns Q ~ 1 on the success frames, lower at episode starts.

    (A tiny temperature: SAC's soft target adds ``-alpha * log pi`` of the next action at every step, which with
    ``alpha = 1`` and a fresh actor outweighs a sparse reward of 1 many times over.)
    """
    torch.manual_seed(0)
    env = sim.make_env("so101_lift", num_envs=1)
    agent = make_agent(RLPDConfig(demos=str(lift_demos), critic_obs="policy", demo_fraction=1.0, batch_size=64,
                                  buffer_size=100, critic_lr=1e-3, critic_warmup_updates=400,
                                  actor_hidden_dims=[32, 32], init_alpha=1e-4, autotune=False),
                       LayerNormEnsembleCriticConfig(hidden_dims=[64, 64]), EnvSpec.from_env(env))
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(400):
        agent.learn(agent.sample_batch())
        agent.updates += 1
    assert all(torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters(), strict=True))
    demos = agent.demo_source.buffer
    success = demos.reward[:, 0] > 0
    start = torch.ones_like(success)
    start[1:] = demos.terminated[:-1, 0]  # the frame after an episode end starts the next episode
    with torch.no_grad():
        q = agent.critic(demos.obs["policy"][:, 0], demos.action[:, 0]).squeeze(-1)
    assert q[success].min() > 0.5, q[success]
    assert q[success].mean() > q[start].mean() + 0.2, (q[success], q[start])
    env.close()
