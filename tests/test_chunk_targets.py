"""Chunk targets and episode-boundary masking against sequences computed by hand."""

import pytest
import torch

from robot_rl.data.replay_buffer import ReplayBuffer
from robot_rl.math.chunk_targets import alive_mask, chunk_return, intra_chunk_returns


def _chunk(rewards, terminated=None, truncated=None):
    r = torch.tensor([rewards], dtype=torch.float32)
    term = torch.zeros_like(r, dtype=torch.bool) if terminated is None else torch.tensor([terminated])
    trunc = torch.zeros_like(r, dtype=torch.bool) if truncated is None else torch.tensor([truncated])
    return r, term, trunc


def test_full_chunk_sums_h_rewards_and_bootstraps_gamma_h():
    # 1 + 0.5*2 + 0.25*3 + 0.125*4 = 3.25; bootstrap gamma^4 = 0.0625 from the last step.
    out = chunk_return(*_chunk([1.0, 2.0, 3.0, 4.0]), gamma=0.5)
    assert out.returns.item() == pytest.approx(3.25)
    assert out.discount.item() == pytest.approx(0.0625)
    assert out.last.item() == 3 and out.length.item() == 4 and out.valid.item()


def test_termination_inside_chunk_stops_the_sum_with_no_bootstrap_and_stays_valid():
    # Terminal at step 1: 1 + 0.5*2 = 2, the next episode's 100 and 50 are ignored, discount 0.
    out = chunk_return(*_chunk([1.0, 2.0, 100.0, 50.0], terminated=[False, True, False, False]), 0.5, "mask")
    assert out.returns.item() == pytest.approx(2.0)
    assert out.discount.item() == 0.0
    assert out.last.item() == 1 and out.valid.item()


def test_truncation_inside_chunk_bootstraps_or_masks():
    r, term, trunc = _chunk([1.0, 2.0, 9.0], truncated=[False, True, False])
    boot = chunk_return(r, term, trunc, 0.9, "bootstrap")
    # 1 + 0.9*2 = 2.8, bootstrap 0.9^2 = 0.81 from step 1's final observation.
    assert boot.returns.item() == pytest.approx(2.8)
    assert boot.discount.item() == pytest.approx(0.81)
    assert boot.last.item() == 1 and boot.valid.item()
    masked = chunk_return(r, term, trunc, 0.9, "mask")
    assert not masked.valid.item()
    # A truncation on the chunk's own last step cuts nothing: the chunk stays valid.
    last_step = chunk_return(*_chunk([1.0, 1.0], truncated=[False, True]), 0.9, "mask")
    assert last_step.valid.item() and last_step.discount.item() == pytest.approx(0.81)


def test_rows_are_independent_and_bad_input_is_named():
    r = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    term = torch.tensor([[True, False], [False, False]])
    out = chunk_return(r, term, torch.zeros_like(term), 1.0)
    assert out.returns.tolist() == [1.0, 2.0]
    assert out.discount.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="on_truncation"):
        chunk_return(r, term, term, 0.9, "drop")
    with pytest.raises(ValueError, match="gamma"):
        chunk_return(r, term, term, 1.5)


def test_alive_mask_keeps_steps_up_to_the_first_end_along_either_axis():
    term = torch.tensor([[False, False, True, False], [False, False, False, False]])
    trunc = torch.tensor([[False, False, False, False], [True, False, False, True]])
    expected = [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    assert alive_mask(term, trunc).tolist() == expected
    assert alive_mask(term.T, trunc.T, dim=0).T.tolist() == expected  # time-major [T, B]


def test_intra_chunk_returns_one_target_per_prefix():
    r, term, trunc = _chunk([1.0, 2.0, 4.0])
    v = torch.tensor([[10.0, 20.0, 30.0]])
    y, executed = intra_chunk_returns(r, term, trunc, v, gamma=0.5)
    # k=1: 1 + 0.5*10 = 6; k=2: 1 + 1 + 0.25*20 = 7; k=3: 1 + 1 + 1 + 0.125*30 = 6.75
    assert y.squeeze(0).tolist() == pytest.approx([6.0, 7.0, 6.75])
    assert executed.all()


def test_intra_chunk_returns_repeat_the_ending_target_after_termination():
    r, term, trunc = _chunk([1.0, 2.0, 4.0], terminated=[False, True, False])
    v = torch.tensor([[10.0, 20.0, 30.0]])
    y, executed = intra_chunk_returns(r, term, trunc, v, gamma=0.5)
    # k=1: 6; k=2: 1 + 1 (terminal, no bootstrap) = 2; k=3 repeats 2.
    assert y.squeeze(0).tolist() == pytest.approx([6.0, 2.0, 2.0])
    assert executed.squeeze(0).tolist() == [True, True, False]


def test_sample_chunks_from_replay_masks_episode_ends_and_pads_actions():
    # One env, 6 steps: rewards 1..6, action = step index, termination at step 2 (index 2).
    buf = ReplayBuffer(capacity=8, num_envs=1, observation_dims={"policy": 1}, action_dim=1)
    for t in range(6):
        buf.add({"policy": torch.tensor([[float(t)]])}, torch.tensor([[float(t)]]), torch.tensor([t + 1.0]),
                {"policy": torch.tensor([[t + 0.5]])}, torch.tensor([t == 2]), torch.tensor([False]))
    batch = buf.sample_chunks(400, chunk_len=3, gamma=0.5, generator=torch.Generator().manual_seed(0))
    first = batch.obs["policy"][:, 0].long()
    for t in range(6):
        rows = first == t
        assert rows.any(), f"start {t} never sampled"
        i = int(rows.nonzero()[0])
        if t == 0:  # 1 + 0.5*2 + 0.25*3, terminal at step 2: no bootstrap
            expected, disc, actions = 2.75, 0.0, [0, 1, 2]
        elif t == 1:  # 2 + 0.5*3, terminal
            expected, disc, actions = 3.5, 0.0, [1, 2, 2]
        elif t == 2:  # 3, terminal
            expected, disc, actions = 3.0, 0.0, [2, 2, 2]
        elif t == 3:  # 4 + 0.5*5 + 0.25*6, the newest step ends the window: bootstrap 0.125
            expected, disc, actions = 8.0, 0.125, [3, 4, 5]
        elif t == 4:  # 5 + 0.5*6, newest after 2 steps: bootstrap 0.25
            expected, disc, actions = 8.0, 0.25, [4, 5, 5]
        else:
            expected, disc, actions = 6.0, 0.5, [5, 5, 5]
        assert batch.target.returns[i].item() == pytest.approx(expected), t
        assert batch.target.discount[i].item() == pytest.approx(disc), t
        assert batch.actions[i, :, 0].tolist() == actions, t
        assert batch.next_obs["policy"][i, 0].item() == pytest.approx(t + batch.target.last[i].item() + 0.5)
