"""TD-target math against values computed by hand."""

import pytest
import torch

from robot_rl.math.td_targets import categorical_projection, nstep_return, truncate_quantiles


def _window(rewards, terminated=None, truncated=None):
    r = torch.tensor([rewards], dtype=torch.float32)
    term = torch.zeros_like(r, dtype=torch.bool) if terminated is None else torch.tensor([terminated])
    trunc = torch.zeros_like(r, dtype=torch.bool) if truncated is None else torch.tensor([truncated])
    return r, term, trunc


def test_nstep_no_boundary():
    # 1 + 0.5*2 + 0.25*3 = 2.75, bootstrap gamma^3 from the last step.
    out = nstep_return(*_window([1.0, 2.0, 3.0]), gamma=0.5)
    assert out.returns.item() == pytest.approx(2.75)
    assert out.discount.item() == pytest.approx(0.125)
    assert out.last.item() == 2


def test_nstep_termination_masks_later_rewards_and_bootstrap():
    # Terminal at step 1: 1 + 0.5*2 = 2, rewards of the next episode (100) ignored, no bootstrap.
    out = nstep_return(*_window([1.0, 2.0, 100.0], terminated=[False, True, False]), gamma=0.5)
    assert out.returns.item() == pytest.approx(2.0)
    assert out.discount.item() == 0.0
    assert out.last.item() == 1


def test_nstep_truncation_bootstraps_from_final_obs_step():
    # Time-out at step 0: return 1, bootstrap gamma^1 from step 0's final observation.
    out = nstep_return(*_window([1.0, 7.0, 9.0], truncated=[True, False, False]), gamma=0.9)
    assert out.returns.item() == pytest.approx(1.0)
    assert out.discount.item() == pytest.approx(0.9)
    assert out.last.item() == 0


def test_nstep_first_boundary_wins_and_batch_rows_are_independent():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 4.0]])
    terminated = torch.tensor([[False, False, True, False], [False, False, False, False]])
    truncated = torch.tensor([[False, True, False, False], [False, False, False, False]])
    out = nstep_return(rewards, terminated, truncated, gamma=0.5)
    # Row 0: truncated at step 1 before the termination at 2: 1 + 0.5 = 1.5, discount 0.25.
    # Row 1: 2 + 0.125*4 = 2.5, discount 0.0625.
    torch.testing.assert_close(out.returns, torch.tensor([1.5, 2.5]))
    torch.testing.assert_close(out.discount, torch.tensor([0.25, 0.0625]))
    assert out.last.tolist() == [1, 3]


def test_nstep_one_step_is_plain_td():
    out = nstep_return(*_window([3.0], terminated=[True]), gamma=0.99)
    assert (out.returns.item(), out.discount.item(), out.last.item()) == (3.0, 0.0, 0)


def test_nstep_rejects_bad_gamma_and_shapes():
    with pytest.raises(ValueError, match="gamma must be in"):
        nstep_return(*_window([1.0]), gamma=1.5)
    with pytest.raises(ValueError, match=r"rewards must be \[B, n\]"):
        nstep_return(torch.zeros(3), torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool), 0.9)


def test_c51_projection_hand_computed():
    # Support {-1, 0, 1}. Z has mass 0.5 on 0 and 0.5 on 1; target = 0.25 + 0.5 * Z.
    # Atom 0 -> 0.25: 0.75 on atom "0", 0.25 on atom "1". Atom 1 -> 0.75: 0.25 / 0.75.
    # Atom -1 (mass 0) -> -0.25. Result: [0, 0.5*0.75 + 0.5*0.25, 0.5*0.25 + 0.5*0.75] = [0, .5, .5].
    support = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.0, 0.5, 0.5]])
    out = categorical_projection(probs, torch.tensor([0.25]), torch.tensor([0.5]), support)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.5, 0.5]]))


def test_c51_projection_asymmetric_split_and_clipping():
    # Support {0, 1, 2}; all mass on atom 2; reward 0.3, discount 0.5 -> 1.3: 0.7 on 1, 0.3 on 2.
    support = torch.tensor([0.0, 1.0, 2.0])
    out = categorical_projection(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([0.3]), torch.tensor([0.5]), support
    )
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.7, 0.3]]))
    # Reward 5 pushes every atom beyond v_max = 2: all mass clipped onto the last atom.
    out = categorical_projection(
        torch.tensor([[0.2, 0.3, 0.5]]), torch.tensor([5.0]), torch.tensor([0.9]), support
    )
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 1.0]]))


def test_c51_projection_terminal_is_a_point_mass_on_the_reward():
    # discount 0: every atom maps to the reward 1.0 exactly (lower == upper) -> one-hot on atom 1.
    support = torch.tensor([0.0, 1.0, 2.0])
    out = categorical_projection(
        torch.tensor([[0.2, 0.3, 0.5]]), torch.tensor([1.0]), torch.tensor([0.0]), support
    )
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0, 0.0]]))


def test_c51_projection_preserves_mass():
    support = torch.linspace(-10, 10, 51)
    probs = torch.softmax(torch.randn(64, 51, generator=torch.Generator().manual_seed(0)), dim=1)
    out = categorical_projection(probs, torch.randn(64) * 3, torch.rand(64), support)
    torch.testing.assert_close(out.sum(dim=1), torch.ones(64))


def test_truncate_quantiles_hand_computed():
    # Two critics, three quantiles each; pooled sorted: 1 2 3 4 5 6; drop 1 per critic -> 1 2 3 4.
    q = torch.tensor([[[1.0, 5.0, 6.0], [2.0, 3.0, 4.0]]])
    torch.testing.assert_close(truncate_quantiles(q, 1), torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    torch.testing.assert_close(truncate_quantiles(q, 0), torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]))


def test_truncate_quantiles_rejects_dropping_everything():
    with pytest.raises(ValueError, match="drop_per_critic must be in"):
        truncate_quantiles(torch.zeros(1, 2, 3), 3)
