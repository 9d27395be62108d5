"""chunked_td3 with demonstrations: demo chunks (windows, masks) by hand, the agent's demo partition on a real
recorded so101_lift dataset, the behaviour-cloning term, checkpoints, and clear config errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from agent_loop import drive
from expert_demos import record_expert_demos

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.chunked_td3 import ChunkedTD3, ChunkedTD3Config
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.critics.chunked import ChunkedCriticConfig
from robot_rl.data.demo_mix import sample_mixed
from robot_rl.data.replay_buffer import ChunkBatch, ReplayBuffer
from robot_rl.data.transitions import demo_transitions

pytestmark = pytest.mark.usefixtures("one_thread")

GAMMA = 0.5
# Demo partition by hand: episode A = rows 0-2 (terminates at row 2, reward 1 there), episode B = rows 3-6 (time
# limit at row 6, reward 1 there). Row i holds obs i + 1, action 10 (i + 1), true next obs 100 + i.
TERMINATED = [False, False, True, False, False, False, False]
TRUNCATED = [False, False, False, False, False, False, True]
REWARD = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
# Chunks of h = 3 by start row: (actions, rewards, returns, discount, bootstrap row, valid with on_truncation=mask).
EXPECTED = {
    0: ([10, 20, 30], [0, 0, 1], 0.25, 0.0, 2, True),  # termination at the chunk's last step: no bootstrap
    1: ([20, 30, 30], [0, 1, 0], 0.5, 0.0, 2, True),  # terminates at step 1; later actions repeat the last one
    2: ([30, 30, 30], [1, 0, 0], 1.0, 0.0, 2, True),
    3: ([40, 50, 60], [0, 0, 0], 0.0, 0.125, 5, True),  # never crosses into episode A's rows: gamma^3 bootstrap
    4: ([50, 60, 70], [0, 0, 1], 0.25, 0.125, 6, True),  # truncated at its last step: a full chunk
    5: ([60, 70, 70], [0, 1, 0], 0.5, 0.25, 6, False),  # cut by the time limit: bootstrap gamma^2, or masked
    6: ([70, 70, 70], [1, 0, 0], 1.0, 0.5, 6, False),
}


def mixed_chunks(online: ReplayBuffer, demos: ReplayBuffer | None, batch_size: int, chunk_len: int, gamma: float,
                 on_truncation: str = "bootstrap", fraction: float = 0.5,
                 generator: torch.Generator | None = None) -> tuple[ChunkBatch, int]:
    """The demo mixer drawing chunks from each partition (what chunked TD3's ``sample_batch`` does, unnormalised)."""
    return sample_mixed(lambda buf, n: buf.sample_chunks(n, chunk_len, gamma, on_truncation, generator), online,
                        demos, batch_size, fraction)


def hand_demos() -> ReplayBuffer:
    demos = ReplayBuffer(7, 1, {"policy": 1}, 1)
    demos.obs["policy"][:, 0, 0] = torch.arange(1, 8).float()
    demos.next_obs["policy"][:, 0, 0] = 100 + torch.arange(7).float()
    demos.action[:, 0, 0] = 10 * torch.arange(1, 8).float()
    demos.reward[:, 0] = torch.tensor(REWARD)
    demos.terminated[:, 0] = torch.tensor(TERMINATED)
    demos.truncated[:, 0] = torch.tensor(TRUNCATED)
    demos.size = 7
    return demos


def online_buffer() -> ReplayBuffer:
    online = ReplayBuffer(20, 2, {"policy": 1}, 1)
    for i in range(12):
        value = -torch.tensor([[2.0 * i + 1], [2.0 * i + 2]])
        online.add({"policy": value}, torch.zeros(2, 1), torch.zeros(2), {"policy": value},
                   torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    return online


@pytest.mark.parametrize("on_truncation", ["bootstrap", "mask"])
def test_demo_chunks_match_hand_computed_windows(on_truncation: str) -> None:
    gen = torch.Generator().manual_seed(0)
    batch, n_demo = mixed_chunks(online_buffer(), hand_demos(), 200, 3, GAMMA, on_truncation, 0.5, gen)
    assert n_demo == 100 and batch.actions.shape == (200, 3, 1)
    starts = batch.obs["policy"][:n_demo, 0].long() - 1
    assert set(starts.tolist()) == set(EXPECTED)  # every start row of the partition is drawn
    for i, start in enumerate(starts.tolist()):
        actions, rewards, returns, discount, boot, valid = EXPECTED[start]
        assert batch.actions[i, :, 0].tolist() == actions
        assert batch.rewards[i].tolist() == rewards
        assert batch.target.returns[i].item() == pytest.approx(returns)
        assert batch.target.discount[i].item() == pytest.approx(discount)
        assert batch.next_obs["policy"][i, 0].item() == 100 + boot
        assert bool(batch.target.valid[i]) == (valid or on_truncation == "bootstrap")
    assert (batch.obs["policy"][n_demo:] < 0).all()  # then online chunks only, never mixed with demo rows
    only_online, none = mixed_chunks(online_buffer(), None, 16, 3, GAMMA, on_truncation, 0.5, gen)
    assert none == 0 and (only_online.obs["policy"] < 0).all()
    all_demo, n = mixed_chunks(online_buffer(), hand_demos(), 16, 3, GAMMA, on_truncation, 1.0, gen)
    assert n == 16 and (all_demo.obs["policy"] > 0).all()


@pytest.fixture(scope="module")
def lift_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 scripted-expert so101_lift episodes (success ends an episode; 2 s time limit)."""
    return record_expert_demos(tmp_path_factory.mktemp("chunked_demos") / "lift", "so101_lift", 3, 3, 2,
                               {"episode_s": 2.0})


def _agent(demos: Path, H: int = 4, **kw) -> ChunkedTD3:
    torch.manual_seed(0)
    env = sim.make_env("so101_lift", num_envs=2, seed=0)
    cfg = ChunkedTD3Config(demos=str(demos), learning_starts=0, batch_size=32, actor_hidden_dims=[32, 32], **kw)
    return make_agent(cfg, ChunkedCriticConfig(chunk_len=H, hidden_dims=[32, 32], layer_norm=True),
                      EnvSpec.from_env(env))


def test_agent_samples_demo_chunks_of_the_recorded_dataset(lift_demos: Path) -> None:
    t = demo_transitions(lift_demos)
    agent = _agent(lift_demos)
    assert agent.critic_group == "policy"  # the demos hold no observation.critic
    demos = agent.demo_source.buffer
    assert len(demos) == len(t["reward"]) and t["terminated"].sum() >= 1
    np.testing.assert_array_equal(demos.obs["policy"][:, 0].numpy(), t["obs"])
    # stored in the agent's normalised box; so101's bounds are [-1, 1], so equal up to float rounding
    np.testing.assert_allclose(demos.action[:, 0].numpy(), t["action"], atol=1e-6)
    ends = t["terminated"] | t["truncated"]
    batch, n_demo = mixed_chunks(agent.buffer, demos, 64, 4, 0.9, "bootstrap", 1.0, torch.Generator().manual_seed(1))
    for i in range(n_demo):
        start = int(batch.rows[i, 0])
        actions, rewards, k = [], [], start  # walk the recorded sequence until the chunk or its episode ends
        while True:
            actions.append(t["action"][k])
            rewards.append(t["reward"][k])
            if ends[k] or len(actions) == 4:
                break
            k += 1
        pad = [actions[-1]] * (4 - len(actions))
        np.testing.assert_allclose(batch.actions[i].numpy(), np.stack(actions + pad), atol=1e-6)
        expected = sum(r * 0.9**j for j, r in enumerate(rewards))
        assert batch.target.returns[i].item() == pytest.approx(expected, abs=1e-6)
        assert batch.target.discount[i].item() == pytest.approx(0.0 if t["terminated"][k] else 0.9 ** len(actions))
        np.testing.assert_array_equal(batch.next_obs["policy"][i].numpy(), t["next_obs"][k])
        assert t["episode"][k] == t["episode"][start]


def test_bc_term_pulls_the_actor_to_the_demo_chunks(lift_demos: Path) -> None:
    agent = _agent(lift_demos, bc_weight=100.0, policy_delay=1, demo_fraction=1.0, intra_chunk_returns=True)
    first = last = None
    for i in range(150):
        batch, n_demo = mixed_chunks(agent.buffer, agent.demo_source.buffer, 32, 4, 0.99, "bootstrap", 1.0)
        metrics = agent.learn(batch, n_demo)
        first = metrics["loss/bc"] if i == 0 else first
        last = metrics["loss/bc"]
    assert last < 0.3 * first, (first, last)


def test_online_steps_then_mixed_updates_and_checkpoint(lift_demos: Path, tmp_path: Path) -> None:
    agent = _agent(lift_demos, bc_weight=1.0, utd_ratio=1.0)
    env = sim.make_env("so101_lift", num_envs=2, seed=0)
    _, metrics = drive(agent, env, 6)
    assert len(agent.buffer) == 12 and "loss/bc" in metrics and metrics["train/updates"] == 12
    path = save_checkpoint(tmp_path, agent.env_steps, agent.state_dict())
    again = _agent(lift_demos, bc_weight=1.0, utd_ratio=1.0)
    again.load_state_dict(load_checkpoint(path)[1])
    assert again.updates == 12
    assert torch.equal(again.demo_source.buffer.obs["policy"], agent.demo_source.buffer.obs["policy"])
    state = agent.state_dict()
    state["demos"] = {**state["demos"], "transitions": 5}
    with pytest.raises(ValueError, match="demo transitions"):
        again.load_state_dict(state)


def test_clear_errors_for_bad_demo_settings(tmp_path: Path) -> None:
    env = sim.make_env("so101_lift", num_envs=1, seed=0)
    with pytest.raises(FileNotFoundError, match=f"agent.demos={tmp_path / 'nowhere'} is not a LeRobot dataset"):
        make_agent(ChunkedTD3Config(demos=str(tmp_path / "nowhere")), ChunkedCriticConfig(), EnvSpec.from_env(env))
    with pytest.raises(ValueError, match="demo_fraction must be in"):
        ChunkedTD3Config(demos="x", demo_fraction=1.5)
    with pytest.raises(ValueError, match=r"bc_weight=1\.0 .* only with demos"):
        ChunkedTD3Config(bc_weight=1.0)
    with pytest.raises(ValueError, match="only_success_demos=true"):
        ChunkedTD3Config(demos="x", success_only_actor=True)
