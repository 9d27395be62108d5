"""The one demo mixer: demo rows first then online rows, each drawn by the same sampler from its own partition."""

import pytest
import torch

from robot_rl.data.demo_mix import cat_batches, demo_rows, sample_mixed
from robot_rl.data.replay_buffer import ReplayBuffer


def marked_buffers() -> tuple[ReplayBuffer, ReplayBuffer]:
    """``(online, demos)``: demo rows hold observation +1..+30, online rows -1..-80, so every sampled row says where
    it came from."""
    demos = ReplayBuffer(30, 1, {"policy": 1}, 2)
    for i in range(30):
        value = torch.tensor([[i + 1.0]])
        demos.add({"policy": value}, torch.zeros(1, 2), torch.zeros(1), {"policy": value}, torch.zeros(1, dtype=bool),
                  torch.zeros(1, dtype=bool))
    online = ReplayBuffer(50, 2, {"policy": 1}, 2)
    for i in range(40):
        value = -torch.tensor([[2.0 * i + 1], [2.0 * i + 2]])
        online.add({"policy": value}, torch.zeros(2, 2), torch.zeros(2), {"policy": value},
                   torch.zeros(2, dtype=bool), torch.zeros(2, dtype=bool))
    return online, demos


def transitions(buffer: ReplayBuffer, n: int):
    return buffer.sample(n)


def test_symmetric_sampling_is_exactly_half_and_never_mixes() -> None:
    online, demos = marked_buffers()
    torch.manual_seed(0)
    seen_demo, seen_online = set(), set()
    for batch_size in (64, 256, 7):
        b, n_demo = sample_mixed(transitions, online, demos, batch_size, 0.5)
        obs = b.obs["policy"][:, 0]
        assert n_demo == demo_rows(batch_size, 0.5) == round(batch_size / 2) and len(obs) == batch_size
        assert (obs[:n_demo] > 0).all() and (obs[n_demo:] < 0).all()  # demo rows first, online rows after
        assert len(b.action) == len(b.reward) == len(b.discount) == len(b.next_obs["policy"]) == batch_size
        seen_demo |= set(obs[:n_demo].tolist())
        seen_online |= set(obs[n_demo:].tolist())
    assert seen_demo <= set(range(1, 31)) and len(seen_demo) > 20  # uniform over the whole demo partition
    assert seen_online <= {-float(v) for v in range(1, 81)} and len(seen_online) > 40
    only_demo, n = sample_mixed(transitions, online, demos, 16, 1.0)
    assert n == 16 and (only_demo.obs["policy"] > 0).all()
    only_online, n = sample_mixed(transitions, online, None, 16, 0.5)  # no demos: every row online
    assert n == 0 and (only_online.obs["policy"] < 0).all()
    with pytest.raises(ValueError, match="demo_fraction must be in"):
        sample_mixed(transitions, online, demos, 8, 1.5)
    with pytest.raises(ValueError, match="do not match the online"):
        sample_mixed(transitions, ReplayBuffer(5, 1, {"critic": 1}, 2), demos, 8, 0.5)


def test_the_same_draws_as_sampling_each_partition_in_turn() -> None:
    """The mixer adds no randomness of its own: demo draw, then online draw, from the one generator."""
    online, demos = marked_buffers()
    gen = torch.Generator().manual_seed(3)
    mixed, n_demo = sample_mixed(lambda buf, n: buf.sample_chunks(n, 3, 0.9, generator=gen), online, demos, 10, 0.3)
    gen.manual_seed(3)
    first, second = demos.sample_chunks(3, 3, 0.9, generator=gen), online.sample_chunks(7, 3, 0.9, generator=gen)
    assert n_demo == 3
    expected = cat_batches(first, second)  # nested ChunkReturn and dict fields too
    torch.testing.assert_close(mixed.actions, expected.actions)
    torch.testing.assert_close(mixed.target.returns, torch.cat([first.target.returns, second.target.returns]))
    assert torch.equal(mixed.rows, torch.cat([first.rows, second.rows]))
    assert torch.equal(mixed.obs["policy"], torch.cat([first.obs["policy"], second.obs["policy"]]))
