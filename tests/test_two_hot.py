"""symlog / symexp / two-hot discrete regression (robot_rl.math.two_hot) against hand-computed values."""

import math

import pytest
import torch

from robot_rl.math.two_hot import bins, symexp, symlog, two_hot, two_hot_cross_entropy, two_hot_inv

# 5 bins on [-2, 2] in symlog space: centres -2, -1, 0, 1, 2 (spacing 1).
K, LO, HI = 5, -2.0, 2.0


def test_symlog_and_symexp_by_hand():
    x = torch.tensor([0.0, 3.0, -3.0, math.e - 1.0, -(math.e**2 - 1.0)])
    expected = torch.tensor([0.0, math.log(4.0), -math.log(4.0), 1.0, -2.0])
    assert torch.allclose(symlog(x), expected, atol=1e-6)
    assert torch.allclose(symexp(expected), x, atol=1e-5)
    big = torch.tensor([-1e4, -0.5, 0.25, 1e4])
    assert torch.allclose(symexp(symlog(big)), big, rtol=1e-5)


def test_two_hot_on_a_bin_between_two_bins_and_clamped_outside_by_hand():
    x = torch.tensor([
        0.0,                       # symlog 0 -> on the centre bin
        math.e - 1.0,              # symlog 1 -> on bin 3
        math.exp(0.25) - 1.0,      # symlog 0.25 -> 3/4 on bin 2 (0), 1/4 on bin 3 (1)
        -(math.exp(1.5) - 1.0),    # symlog -1.5 -> half on bin 0 (-2), half on bin 1 (-1)
        math.exp(1.9) - 1.0,       # symlog 1.9 -> 0.1 on bin 3, 0.9 on the top bin
        1000.0,                    # symlog 6.9 > 2 -> all on the top bin
        -1000.0,                   # symlog -6.9 < -2 -> all on the bottom bin
        math.e**2 - 1.0,           # symlog exactly vmax -> the top bin
    ])
    expected = torch.tensor([
        [0.0, 0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.75, 0.25, 0.0],
        [0.5, 0.5, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.1, 0.9],
        [0.0, 0.0, 0.0, 0.0, 1.0],
        [1.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 1.0],
    ])
    got = two_hot(x, K, LO, HI)
    assert got.shape == (8, K)
    assert torch.allclose(got, expected, atol=1e-5), got
    # Leading shapes are kept: [2, 4] scalars -> [2, 4, K].
    assert two_hot(x.reshape(2, 4), K, LO, HI).shape == (2, 4, K)
    assert torch.equal(bins(K, LO, HI), torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]))


def test_two_hot_inverse_round_trip_and_uniform_logits_read_zero():
    x = torch.tensor([-5.0, -0.3, 0.0, 0.7, 4.2])  # |symlog| < 2: inside the range
    logits = two_hot(x, K, LO, HI).log()  # -inf where a bin has no mass; softmax gives it weight 0
    assert torch.allclose(two_hot_inv(logits, LO, HI), x, atol=1e-4)
    # Outside the range the read-out saturates at symexp(vmax) = e^2 - 1.
    assert torch.allclose(two_hot_inv(two_hot(torch.tensor([50.0]), K, LO, HI).log(), LO, HI),
                          torch.tensor([math.e**2 - 1.0]), atol=1e-4)
    assert float(two_hot_inv(torch.zeros(K), LO, HI)) == 0.0  # uniform over symmetric bins: read-out 0
    # TD-MPC2's bins: 101 on [-10, 10]; a return of -123.4 round-trips.
    assert torch.allclose(two_hot_inv(two_hot(torch.tensor([-123.4]), 101, -10, 10).log(), -10, 10),
                          torch.tensor([-123.4]), rtol=1e-4)


def test_two_hot_cross_entropy_by_hand():
    x = torch.tensor([math.exp(0.25) - 1.0])  # target 3/4 on bin 2, 1/4 on bin 3
    uniform = two_hot_cross_entropy(torch.zeros(1, K), x, LO, HI)
    assert torch.allclose(uniform, torch.tensor([math.log(5.0)]), atol=1e-6)  # -sum p log(1/5)
    exact = two_hot_cross_entropy(two_hot(x, K, LO, HI).clamp(min=1e-30).log(), x, LO, HI)
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # 0.5623: the floor of the loss
    assert torch.allclose(exact, torch.tensor([entropy]), atol=1e-5)
    logits = torch.zeros(1, K, requires_grad=True)
    two_hot_cross_entropy(logits, x, LO, HI).sum().backward()
    # d CE / d logits = softmax - target = 0.2 - [0, 0, 0.75, 0.25, 0]
    assert torch.allclose(logits.grad, torch.tensor([[0.2, 0.2, -0.55, -0.05, 0.2]]), atol=1e-6)


def test_two_hot_refuses_bad_bins():
    with pytest.raises(ValueError, match="num_bins must be >= 2"):
        two_hot(torch.zeros(3), 1, LO, HI)
    with pytest.raises(ValueError, match="vmin must be < vmax"):
        two_hot(torch.zeros(3), K, 2.0, 2.0)
