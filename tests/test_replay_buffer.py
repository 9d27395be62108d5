"""Replay buffer: ring layout, true next observations, n-step windows across boundaries."""

import pytest
import torch

from robot_rl.data.replay_buffer import ReplayBuffer


def _fill(buffer, rewards, terminated=None, truncated=None):
    """Add rows whose policy obs encodes (step, env) as 100*step + env, next obs = that + 0.5."""
    steps, num_envs = len(rewards), buffer.num_envs
    for t in range(steps):
        obs = torch.tensor([[100.0 * t + e] for e in range(num_envs)])
        buffer.add(
            {"policy": obs},
            obs.clone(),
            torch.tensor(rewards[t], dtype=torch.float32),
            {"policy": obs + 0.5},
            torch.tensor(terminated[t] if terminated else [False] * num_envs),
            torch.tensor(truncated[t] if truncated else [False] * num_envs),
        )


def _sample_all(buffer, n_step, gamma):
    batch = buffer.sample(4096, n_step=n_step, gamma=gamma, generator=torch.Generator().manual_seed(0))
    table = {}
    for i in range(4096):
        key = batch.obs["policy"][i, 0].item()
        table[key] = (batch.reward[i].item(), batch.discount[i].item(), batch.next_obs["policy"][i, 0].item())
        assert batch.action[i, 0].item() == key  # action stored alongside its obs
    return table


def test_one_step_sampling_returns_stored_transitions():
    buffer = ReplayBuffer(8, 2, {"policy": 1}, 1)
    _fill(buffer, [[1.0, 2.0], [3.0, 4.0]], terminated=[[False, True], [False, False]],
          truncated=[[False, False], [True, False]])
    table = _sample_all(buffer, n_step=1, gamma=0.9)
    assert len(buffer) == 4 and set(table) == {0.0, 1.0, 100.0, 101.0}
    assert table[0.0] == pytest.approx((1.0, 0.9, 0.5))
    assert table[1.0] == pytest.approx((2.0, 0.0, 1.5))  # terminated: no bootstrap
    assert table[100.0] == pytest.approx((3.0, 0.9, 100.5))  # truncated: bootstraps from its own (final) obs


def test_one_step_sampling_after_the_ring_wrapped():
    buffer = ReplayBuffer(3, 2, {"policy": 1}, 1)
    _fill(buffer, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], terminated=[[False] * 2] * 3 + [[True, False]])
    table = _sample_all(buffer, n_step=1, gamma=0.5)
    assert set(table) == {100.0, 101.0, 200.0, 201.0, 300.0, 301.0}  # step 0 overwritten by step 3
    assert table[300.0] == pytest.approx((7.0, 0.0, 300.5))
    assert table[301.0] == pytest.approx((8.0, 0.5, 301.5))


def test_nstep_windows_stop_at_boundaries_and_at_the_newest_row():
    # env 0: truncated at step 1; env 1: no boundary.  gamma 0.5, n = 3, four steps stored.
    buffer = ReplayBuffer(8, 2, {"policy": 1}, 1)
    rewards = [[1.0, 1.0], [2.0, 2.0], [4.0, 4.0], [8.0, 8.0]]
    truncated = [[False, False], [True, False], [False, False], [False, False]]
    _fill(buffer, rewards, truncated=truncated)
    table = _sample_all(buffer, n_step=3, gamma=0.5)
    # env 0 from step 0: 1 + 0.5*2 = 2, truncation -> bootstrap gamma^2 from step 1's final obs.
    assert table[0.0] == pytest.approx((2.0, 0.25, 100.5))
    # env 1 from step 0: 1 + 1 + 1 = 3, bootstrap gamma^3 from step 2's next obs.
    assert table[1.0] == pytest.approx((3.0, 0.125, 201.5))
    # env 1 from step 2: only two rows left -> 4 + 0.5*8 = 8, bootstrap gamma^2 from the newest row.
    assert table[201.0] == pytest.approx((8.0, 0.25, 301.5))
    # env 1 from the newest row: plain one-step.
    assert table[301.0] == pytest.approx((8.0, 0.5, 301.5))


def test_ring_overwrites_oldest_and_windows_do_not_wrap_into_old_data():
    buffer = ReplayBuffer(3, 1, {"policy": 1}, 1)
    _fill(buffer, [[1.0], [2.0], [3.0], [4.0], [5.0]])  # rows 0,1 overwritten by steps 3,4
    table = _sample_all(buffer, n_step=2, gamma=1.0)
    assert set(table) == {200.0, 300.0, 400.0}
    assert table[200.0] == pytest.approx((7.0, 1.0, 300.5))
    assert table[400.0] == pytest.approx((5.0, 1.0, 400.5))  # newest: not continued by step 2


def test_true_next_obs_uses_final_obs_where_done():
    next_obs = {"policy": torch.tensor([[1.0], [2.0]])}
    final_obs = {"policy": torch.tensor([[9.0], [8.0]])}
    out = ReplayBuffer.true_next_obs(next_obs, final_obs, torch.tensor([False, True]))
    torch.testing.assert_close(out["policy"], torch.tensor([[1.0], [8.0]]))


def test_errors_name_the_problem():
    buffer = ReplayBuffer(4, 1, {"policy": 1, "critic": 2}, 1)
    with pytest.raises(RuntimeError, match="empty replay buffer"):
        buffer.sample(1)
    with pytest.raises(KeyError, match="'critic' missing"):
        no, one = torch.zeros(1, dtype=torch.bool), {"policy": torch.zeros(1, 1)}
        buffer.add(one, torch.zeros(1, 1), torch.zeros(1), one, no, no)
    with pytest.raises(ValueError, match="capacity and num_envs"):
        ReplayBuffer(0, 1, {"policy": 1}, 1)


def test_extend_stores_what_as_many_adds_store_and_wraps_the_ring():
    added, extended = ReplayBuffer(4, 2, {"policy": 1}, 1), ReplayBuffer(4, 2, {"policy": 1}, 1)
    rewards = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    _fill(added, rewards + rewards, terminated=[[False, True]] * 6)  # 6 steps into 4 rows: the ring wraps
    obs = torch.tensor([[[100.0 * t + e] for e in range(2)] for t in range(6)])  # [6, 2, 1] as _fill writes them
    kw = dict(reward=torch.tensor(rewards + rewards), terminated=torch.tensor([[False, True]] * 6),
              truncated=torch.zeros(6, 2, dtype=torch.bool))
    extended.extend({"policy": obs[:3]}, obs[:3], next_obs={"policy": obs[:3] + 0.5},
                    **{k: v[:3] for k, v in kw.items()})
    extended.extend({"policy": obs[3:]}, obs[3:], next_obs={"policy": obs[3:] + 0.5},
                    **{k: v[3:] for k, v in kw.items()})
    for key, value in added.state_dict().items():
        got = extended.state_dict()[key]
        if isinstance(value, dict):
            assert all(torch.equal(got[g], v) for g, v in value.items()), key
        else:
            assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value, key
    assert (extended.position, extended.size, len(extended)) == (2, 4, 8)
    # oldest stored step first (step 2 sits in ring row 2), envs within a step
    assert extended.observations("policy")[:, 0].tolist() == [200.0, 201.0, 300.0, 301.0, 400.0, 401.0, 500.0, 501.0]
    with pytest.raises(ValueError, match=r"extend needs 1\.\.4 steps"):
        extended.extend({"policy": obs}, obs, next_obs={"policy": obs}, **kw)


def test_next_obs_at_reads_the_true_next_observation_of_each_step():
    buffer = ReplayBuffer(8, 2, {"policy": 1}, 1)
    _fill(buffer, [[0.0, 0.0]] * 3)
    rows, env = torch.tensor([[0, 1, 2], [2, 2, 1]]), torch.tensor([1, 0])
    assert buffer.next_obs_at(rows, env)["policy"][..., 0].tolist() == [[1.5, 101.5, 201.5], [200.5, 200.5, 100.5]]
