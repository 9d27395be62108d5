"""C51 and quantile critics: loss math by hand, projection with groups, learning known distributions."""

import pytest
import torch

from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.distributional import C51CriticConfig, QuantileCriticConfig, quantile_huber_loss
from robot_rl.math.td_targets import categorical_projection

SPEC = CriticSpec(obs_dim=2, action_dim=1)


def test_quantile_huber_loss_hand_computed():
    # One quantile (tau = 0.5), target 1 above it: huber(1) = 0.5, weight |0.5 - 0| = 0.5 -> 0.25.
    assert quantile_huber_loss(torch.tensor([[0.0]]), torch.tensor([[1.0]])).item() == pytest.approx(0.25)
    # Two quantiles (tau 0.25, 0.75) at 0, one target at -3: huber = 3 - 0.5 = 2.5;
    # weights |0.25 - 1| = 0.75 and |0.75 - 1| = 0.25 -> mean(0.75*2.5, 0.25*2.5) = 1.25.
    loss = quantile_huber_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[-3.0]]))
    assert loss.item() == pytest.approx(1.25)


def test_c51_estimates_are_expected_values_and_projection_handles_groups():
    spec = CriticSpec(obs_dim=2, action_dim=1, num_values=3)
    critic = make_critic(C51CriticConfig(num_atoms=11, v_min=-5, v_max=5, hidden_dims=[8]), spec)
    obs, action = torch.randn(4, 2), torch.randn(4, 1)
    logits = critic.distribution(obs, action)
    assert logits.shape == (2, 4, 3, 11)
    torch.testing.assert_close(critic.estimates(obs, action), (logits.softmax(-1) * critic.support).sum(-1))
    probs = torch.softmax(torch.randn(4, 3, 11), -1)
    returns, discount = torch.randn(4, 3), torch.rand(4)
    projected = critic.project(probs, returns, discount)
    for g in range(3):
        torch.testing.assert_close(
            projected[:, g], categorical_projection(probs[:, g], returns[:, g], discount, critic.support)
        )


def _fit(critic, target, steps=300):
    opt = torch.optim.Adam(critic.parameters(), lr=3e-3)
    obs, action = torch.zeros(64, 2), torch.zeros(64, 1)
    for _ in range(steps):
        loss, _ = critic.loss(obs, action, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return critic.distribution(obs[:1], action[:1])


def test_c51_learns_a_target_distribution():
    torch.manual_seed(0)
    critic = make_critic(C51CriticConfig(num_atoms=5, v_min=0, v_max=4, hidden_dims=[32]), SPEC)
    target = torch.tensor([0.1, 0.2, 0.4, 0.2, 0.1]).expand(64, 1, 5)
    probs = _fit(critic, target).softmax(-1)[:, 0, 0]  # [E, K]
    torch.testing.assert_close(probs, target[0, 0].expand(2, 5), atol=0.02, rtol=0)
    assert critic.estimates(torch.zeros(1, 2), torch.zeros(1, 1)).flatten().tolist() == pytest.approx(
        [2.0, 2.0], abs=0.05
    )


def test_quantile_critic_learns_the_quantiles_of_uniform_samples():
    torch.manual_seed(0)
    cfg = QuantileCriticConfig(num_members=2, num_quantiles=4, kappa=0.01, hidden_dims=[32])
    critic = make_critic(cfg, SPEC)
    # kappa << spread: the Huber loss is then a pinball loss, whose minimisers are quantiles.
    target = torch.linspace(0, 1, 201).expand(64, 1, 201)  # atoms uniform on [0, 1]
    quantiles = _fit(critic, target, steps=600)[:, 0, 0]  # [E, M]
    expected = torch.tensor([0.125, 0.375, 0.625, 0.875]).expand(2, 4)
    torch.testing.assert_close(quantiles, expected, atol=0.04, rtol=0)


def test_bad_configs_fail_clearly():
    with pytest.raises(ValueError, match="v_min < v_max"):
        make_critic(C51CriticConfig(v_min=1, v_max=1), SPEC)
    with pytest.raises(ValueError, match="cannot be a V critic"):
        make_critic(QuantileCriticConfig(), CriticSpec(obs_dim=2))
