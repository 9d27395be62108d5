"""FlatParameters: packed views, clipping against hand values and torch, Adam on the pack, old optimiser states."""

import copy

import pytest
import torch
from torch import nn

from robot_rl.agents.flat_params import ALIGN_BYTES, FlatParameters


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.ELU(), nn.Linear(7, 3))  # sizes 35, 7, 21, 3: none a multiple of 16


def test_parameters_become_aligned_views_and_keep_their_values():
    net = _net()
    before = [p.detach().clone() for p in net.parameters()]
    pack = FlatParameters(list(net.parameters()))
    for p, value in zip(net.parameters(), before, strict=True):
        assert torch.equal(p, value)
        offset = (p.data_ptr() - pack.flat.data_ptr()) // p.element_size()
        assert 0 <= offset < pack.flat.numel() and (offset * p.element_size()) % ALIGN_BYTES == 0
        assert p.grad.data_ptr() - pack.flat.grad.data_ptr() == p.data_ptr() - pack.flat.data_ptr()
    with torch.no_grad():
        pack.flat.add_(1.0)  # an optimiser's step on the pack moves the module's parameters
    assert torch.equal(net[0].bias, before[1] + 1.0)


def test_backward_accumulates_into_the_flat_gradient_and_zero_grad_clears_it():
    net = _net()
    pack = FlatParameters(list(net.parameters()))
    x = torch.randn(4, 5)
    net(x).pow(2).sum().backward()
    reference = _net()
    reference(x).pow(2).sum().backward()
    for p, q in zip(net.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert float(pack.flat.grad.abs().sum()) > 0
    pack.zero_grad()
    assert float(pack.flat.grad.abs().sum()) == 0.0 and all(float(p.grad.abs().sum()) == 0 for p in net.parameters())
    pack.check()


def test_clip_grad_norm_matches_hand_values_and_torch():
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    pack = FlatParameters([a, b])
    a.grad.copy_(torch.tensor([3.0, 4.0]))
    b.grad.copy_(torch.tensor([12.0]))  # joint norm 13
    assert float(pack.clip_grad_norm_(6.5)) == pytest.approx(13.0)
    assert torch.allclose(a.grad, torch.tensor([1.5, 2.0]), atol=1e-5) and float(b.grad) == pytest.approx(6.0, abs=1e-5)
    pack.clip_grad_norm_(100.0)  # under the limit: unchanged
    assert torch.allclose(a.grad, torch.tensor([1.5, 2.0]), atol=1e-5)
    ours, theirs = _net(), _net()
    pack = FlatParameters(list(ours.parameters()))
    x = torch.randn(8, 5)
    ours(x).pow(2).sum().backward()
    theirs(x).pow(2).sum().backward()
    torch.testing.assert_close(pack.clip_grad_norm_(0.1), nn.utils.clip_grad_norm_(theirs.parameters(), 0.1))
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-9)  # the same norm, rounded in another order


def test_adam_on_the_pack_follows_adam_on_the_parameters():
    ours, theirs = _net(), _net()
    pack = FlatParameters(list(ours.parameters()))
    opt_ours = torch.optim.Adam([pack.flat], lr=1e-2, fused=True)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True)
    for step in range(5):
        x = torch.randn(8, 5, generator=torch.Generator().manual_seed(step))
        pack.zero_grad()
        opt_theirs.zero_grad(set_to_none=True)
        ours(x).pow(2).sum().backward()
        theirs(x).pow(2).sum().backward()
        opt_ours.step()
        opt_theirs.step()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)  # the fused kernel's vector / scalar rounding
    assert float(pack.flat.abs().sum()) == pytest.approx(sum(float(p.abs().sum()) for p in ours.parameters()))


def test_state_dict_round_trip_and_deepcopy_keep_the_views():
    net, other = _net(0), _net(1)
    pack = FlatParameters(list(net.parameters()))
    net.load_state_dict(other.state_dict())  # copies into the views, so into the pack
    pack.check()
    assert torch.equal(net[2].weight, other[2].weight)
    clone = copy.deepcopy(net)
    with torch.no_grad():
        pack.flat.mul_(0.0)
    assert float(clone[2].weight.abs().sum()) > 0  # the copy owns its own values


def test_check_names_a_gradient_set_to_none():
    net = _net()
    pack = FlatParameters(list(net.parameters()))
    torch.optim.SGD(net.parameters(), lr=0.1).zero_grad(set_to_none=True)
    with pytest.raises(RuntimeError, match=r"never optimizer.zero_grad\(set_to_none=True\)"):
        pack.check()


def test_an_optimiser_state_saved_per_parameter_is_packed_and_steps_alike():
    old, new = _net(), _net()
    opt_old = torch.optim.Adam([{"params": [old[0].weight, old[0].bias]}, {"params": [old[2].weight, old[2].bias]}],
                               lr=1e-2, fused=True)
    x = torch.randn(8, 5)
    old(x).pow(2).sum().backward()
    opt_old.step()
    new.load_state_dict(old.state_dict())
    packs = (FlatParameters([new[0].weight, new[0].bias]), FlatParameters([new[2].weight, new[2].bias]))
    opt_new = torch.optim.Adam([{"params": [packs[0].flat]}, {"params": [packs[1].flat]}], lr=1e-2, fused=True)
    saved = opt_old.state_dict()
    state = saved
    for group, pack in enumerate(packs):
        state = pack.pack_optimizer_state(state, group)
    assert [g["params"] for g in state["param_groups"]] == [[0], [1]]
    assert [g["params"] for g in saved["param_groups"]] == [[0, 1], [2, 3]]  # the saved state is left as it was
    opt_new.load_state_dict(state)
    exp_avg = opt_new.state_dict()["state"][1]["exp_avg"]  # [21 weights, 11 zeros of padding, 3 biases]
    assert exp_avg.shape == packs[1].flat.shape == (35,) and not exp_avg[21:32].any()
    assert torch.equal(exp_avg[:21], opt_old.state[old[2].weight]["exp_avg"].reshape(-1))
    assert torch.equal(exp_avg[32:], opt_old.state[old[2].bias]["exp_avg"])
    for opt, net in ((opt_old, old), (opt_new, new)):
        opt.zero_grad(set_to_none=False)
        net(x).pow(2).sum().backward()
        opt.step()
    for p, q in zip(new.parameters(), old.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    packed = packs[0].pack_optimizer_state(opt_new.state_dict(), 0)  # already packed: as it was
    assert [g["params"] for g in packed["param_groups"]] == [[0], [1]]


def test_a_mismatched_optimiser_state_is_refused():
    net = _net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    net(torch.randn(2, 5)).sum().backward()
    opt.step()
    pack = FlatParameters([net[0].weight, net[0].bias])  # two of the four parameters
    with pytest.raises(ValueError, match="holds 4 parameters, the packed one 2"):
        pack.pack_optimizer_state(opt.state_dict(), 0)


def test_parameters_of_mixed_dtypes_are_refused():
    with pytest.raises(ValueError, match="one dtype and device"):
        FlatParameters([nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, dtype=torch.float64))])
    with pytest.raises(ValueError, match="at least one parameter"):
        FlatParameters([])
