"""GAE with time-out bootstrapping and per-group normalisation, against hand-computed values."""

import pytest
import torch

from robot_rl.math.advantages import gae, normalize_per_group

R = torch.tensor([[1.0], [2.0], [3.0]])  # [T=3, N=1]
V = torch.tensor([[0.5], [1.0], [1.5]])
NEXT_V = torch.tensor([[1.0], [1.5], [2.0]])
NO = torch.zeros(3, 1, dtype=torch.bool)


def _flag(t: int) -> torch.Tensor:
    out = NO.clone()
    out[t] = True
    return out


def test_gae_no_dones_matches_hand_computation():
    # deltas: 1 + .9*1 - .5 = 1.4; 2 + .9*1.5 - 1 = 2.35; 3 + .9*2 - 1.5 = 3.3 ; gamma*lam = .45
    adv, ret = gae(R, V, NEXT_V, NO, NO, gamma=0.9, lam=0.5)
    expected = torch.tensor([[1.4 + 0.45 * (2.35 + 0.45 * 3.3)], [2.35 + 0.45 * 3.3], [3.3]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + V)


def test_truncation_bootstraps_from_final_obs_value_and_cuts_the_trace():
    next_v = NEXT_V.clone()
    next_v[1] = 10.0  # value of the pre-reset final observation at the time limit
    adv, _ = gae(R, V, next_v, NO, _flag(1), gamma=0.9, lam=0.5)
    # delta1 = 2 + .9*10 - 1 = 10, not continued from step 2; A0 = 1.4 + .45*10
    torch.testing.assert_close(adv, torch.tensor([[5.9], [10.0], [3.3]]))


def test_termination_does_not_bootstrap():
    next_v = NEXT_V.clone()
    next_v[1] = 10.0  # ignored: terminal state
    adv, _ = gae(R, V, next_v, _flag(1), _flag(1), gamma=0.9, lam=0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.85], [1.0], [3.3]]))


def test_lambda_one_gamma_one_is_monte_carlo_plus_bootstrap():
    adv, ret = gae(R, V, NEXT_V, NO, NO, gamma=1.0, lam=1.0)
    torch.testing.assert_close(ret, torch.tensor([[8.0], [7.0], [5.0]]))  # 1+2+3+2, 2+3+2, 3+2
    torch.testing.assert_close(adv, ret - V)


def test_reward_groups_are_independent_columns():
    r = torch.stack([R, 2 * R], dim=-1)  # [T, N, G=2]
    v, nv = torch.stack([V, 2 * V], -1), torch.stack([NEXT_V, 2 * NEXT_V], -1)
    adv, _ = gae(r, v, nv, NO, NO, gamma=0.9, lam=0.5)
    torch.testing.assert_close(adv[..., 1], 2 * adv[..., 0])


def test_gae_rejects_bad_arguments():
    with pytest.raises(ValueError, match="gamma"):
        gae(R, V, NEXT_V, NO, NO, gamma=1.5, lam=0.5)
    with pytest.raises(ValueError, match="shapes differ"):
        gae(R, V[:2], NEXT_V, NO, NO, gamma=0.9, lam=0.5)


def test_normalize_per_group_weights_each_group_by_its_weight_not_its_scale():
    adv = torch.tensor([[1.0, 10.0], [3.0, 30.0]])
    torch.testing.assert_close(normalize_per_group(adv), torch.tensor([-2.0, 2.0]))
    torch.testing.assert_close(normalize_per_group(adv, torch.tensor([1.0, 0.5])), torch.tensor([-1.5, 1.5]))
    with pytest.raises(ValueError, match="weights"):
        normalize_per_group(adv, torch.ones(3))
