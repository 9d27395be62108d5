"""The method cores of VLA post-training with critics (docs/vla.md, "RL post-training: the method cores"):
flow-PPO's stochastic sampler and chain likelihoods, DSRL's noise steering, critic-guided flow, best-of-N chunks,
against hand values, Monte-Carlo estimates and toy bandits."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robot_rl.math import flow_sde
from robot_rl.math.ppo_objective import clipped_surrogate
from robot_rl.models.mlp import mlp
from robot_rl.models.vla import VLA, VLAConfig, flow


# ---------------------------------------------------------------- toys
def tiny_vla() -> tuple[VLA, dict]:
    torch.manual_seed(0)
    config = VLAConfig.cpu(state_dim=3, action_dim=2, vocab_size=20, chunk_len=4, max_text_len=6, width=16, heads=2,
                           prefix_layers=1, expert_layers=1, conv_channels=(4, 8), image_grid=2, num_steps=4)
    g = torch.Generator().manual_seed(1)
    mask = torch.arange(6) < 4
    obs = {"images": {"front": torch.randint(0, 256, (2, 3, 16, 16), generator=g, dtype=torch.uint8)},
           "tokens": torch.randint(2, 20, (2, 6), generator=g) * mask, "token_mask": mask.expand(2, -1),
           "state": torch.randn(2, 3, generator=g)}
    return VLA(config).eval(), obs


def gaussian_velocity(mu: float, s: float):
    """The exact velocity of data ``N(mu, s^2)``: ``-mu + (t - (1 - t) s^2) / V_t * (x - (1 - t) mu)`` with
    ``V_t = t^2 + (1 - t)^2 s^2`` (the linear regression of ``n - a`` on ``x_t``)."""
    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(-1, *([1] * (x.dim() - 1)))
        var = t.pow(2) + (1 - t).pow(2) * s**2
        return -mu + (t - (1 - t) * s**2) / var * (x - (1 - t) * mu)
    return velocity


# ---------------------------------------------------------------- flow-PPO
def test_sde_step_hand_values() -> None:
    x, v = torch.tensor([[1.0]]), torch.tensor([[0.5]])
    # t = 0.5, dt = 0.25, a = 0.5: sigma = 0.5 * sqrt(0.5 / 0.5) = 0.5; drift = 0.5 + 0.25 / 1 * (1 + 0.5 * 0.5)
    mean, std = flow_sde.step_distribution(x, v, torch.tensor([0.5]), 0.25, 0.5)
    assert mean.item() == pytest.approx(1 - 0.25 * 0.8125) and std.item() == pytest.approx(0.5 * 0.5)
    # t = 1: 1 - t floored at dt, sigma = 0.5 * sqrt(1 / 0.25) = 1, std = a; drift = 0.5 + 1 / 2 * (1 + 0)
    mean, std = flow_sde.step_distribution(x, v, torch.tensor([1.0]), 0.25, 0.5)
    assert mean.item() == pytest.approx(0.75) and std.item() == pytest.approx(0.5)
    # flow-noise: the Euler mean, the given std
    mean, std = flow_sde.step_distribution(x, v, torch.tensor([0.5]), 0.25, lambda x, t: torch.full_like(x, 0.3))
    assert mean.item() == pytest.approx(0.875) and std.item() == pytest.approx(0.3)
    lp = flow_sde.gaussian_log_prob(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2), torch.tensor([[1.0, 2.0]]))
    assert lp.item() == pytest.approx(-0.5 - 2 * 0.5 * math.log(2 * math.pi) - math.log(2.0))
    assert torch.equal(flow_sde.step_times(4, 2)[:, 0], torch.tensor([1.0, 0.75, 0.5, 0.25]))


def test_noiseless_chain_is_the_euler_sampler_and_has_no_likelihood() -> None:
    torch.manual_seed(0)
    net = mlp(3, [16], 2, "tanh")
    velocity = lambda x, t: net(torch.cat([x, t[:, None]], 1))  # noqa: E731
    noise = torch.randn(5, 2)
    chain = flow_sde.sample_chain(velocity, noise, 6, 0.0)
    assert chain.states.shape == (5, 7, 2) and chain.log_probs is None and torch.equal(chain.states[:, 0], noise)
    assert torch.equal(chain.sample, flow.euler_sample(velocity, noise, 6))
    almost = flow_sde.sample_chain(velocity, noise, 6, 1e-5, torch.Generator().manual_seed(0))
    assert torch.allclose(almost.sample, chain.sample, atol=1e-4)
    with pytest.raises(ValueError, match="noise > 0"):
        flow_sde.chain_log_prob(velocity, chain.states, 0.0)


@pytest.mark.parametrize("noise", [0.5, "learned"])
def test_chain_ratio_is_one_under_the_same_field_and_differentiable(noise) -> None:
    torch.manual_seed(0)
    net = mlp(3, [16], 2, "tanh")
    std_net = mlp(3, [8], 2, "tanh")
    velocity = lambda x, t: net(torch.cat([x, t[:, None]], 1))  # noqa: E731
    if noise == "learned":
        noise = lambda x, t: 0.05 + nn.functional.softplus(std_net(torch.cat([x, t[:, None]], 1)))  # noqa: E731
    with torch.no_grad():
        chain = flow_sde.sample_chain(velocity, torch.randn(8, 2), 5, noise, torch.Generator().manual_seed(1))
    again = flow_sde.chain_log_prob(velocity, chain.states, noise)
    assert again.shape == chain.log_probs.shape == (8, 5)
    assert torch.allclose(again, chain.log_probs, atol=1e-5)
    loss, ratio = clipped_surrogate(again.sum(1), chain.log_probs.sum(1), torch.randn(8), 0.2)
    assert torch.allclose(ratio, torch.ones(8), atol=1e-5)
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    if callable(noise):
        assert all(p.grad is not None for p in std_net.parameters())


def test_chain_likelihood_matches_monte_carlo_on_a_gaussian() -> None:
    g = torch.Generator().manual_seed(0)
    mu, s, level, steps, n = 1.0, 0.5, 0.7, 50, 20_000
    old = gaussian_velocity(mu, s)
    chain = flow_sde.sample_chain(old, torch.randn(n, 1, generator=g), steps, level, g)
    # The SDE keeps the flow's marginals: samples of N(mu, s^2) from its exact velocity (Euler-Maruyama error
    # measured ~0.01); the step without the score term, mean x - dt v with the same std, does not.
    assert chain.sample.mean().item() == pytest.approx(mu, abs=0.03)
    assert chain.sample.std().item() == pytest.approx(s, abs=0.03)
    no_score = flow_sde.sample_chain(old, torch.randn(n, 1, generator=g), steps,
                                     lambda x, t: flow_sde.sde_sigma(t, 1 / steps, level)[:, None] / steps**0.5, g)
    assert no_score.sample.std().item() > s + 0.2
    # Each step's log-likelihood averages to minus the Gaussian entropy of that step: -(1/2) log(2 pi e std^2).
    std = flow_sde.sde_sigma(flow_sde.step_times(steps, 1)[:, 0], 1 / steps, level) / steps**0.5
    entropy = 0.5 * torch.log(2 * math.pi * math.e * std.pow(2))
    assert torch.allclose(chain.log_probs.mean(0), -entropy, atol=0.03)
    # Importance identity: E_old[p_new(chain) / p_old(chain)] = 1 for another field (10 steps, shifted velocity).
    short = flow_sde.sample_chain(old, torch.randn(n, 1, generator=g), 10, level, g)
    new = lambda x, t: old(x, t) + 0.3  # noqa: E731
    log_ratio = flow_sde.chain_log_prob(new, short.states, level).sum(1) - short.log_probs.sum(1)
    assert log_ratio.exp().mean().item() == pytest.approx(1.0, abs=0.02)
    assert log_ratio.mean().item() < -0.01  # -KL(old || new) < 0: the likelihood does tell the fields apart


def test_the_vla_expert_runs_through_the_chain_sampler() -> None:
    """On the VLA: the noiseless chain over ``velocity(x, t, context)`` is ``VLA.sample`` (in the standardised space),
    and a noisy chain's likelihood carries the gradient into the action expert, not into a frozen prefix."""
    vla, obs = tiny_vla()
    vla.set_stats(torch.zeros(3), torch.ones(3), torch.tensor([0.1, -0.2]), torch.tensor([0.5, 2.0]))
    noise = torch.randn(2, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        context = vla.encode(obs)
        chain = flow_sde.sample_chain(lambda x, t: vla.velocity(x, t, context), noise, vla.config.num_steps, 0.0)
        assert torch.allclose(chain.sample * vla.action_std + vla.action_mean, vla.sample(obs, noise), atol=1e-6)
        noisy = flow_sde.sample_chain(lambda x, t: vla.velocity(x, t, context), noise, vla.config.num_steps, 0.5)
    flow_sde.chain_log_prob(lambda x, t: vla.velocity(x, t, context), noisy.states, 0.5).sum().backward()
    assert vla.action_out[1].weight.grad.abs().sum() > 0 and vla.state_proj.weight.grad is None


def test_clipped_surrogate_hand_values() -> None:
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.5])
    advantages = torch.tensor([1.0, 1.0, -2.0, -1.0])
    log_prob = ratio.log().requires_grad_(True)
    loss, r = clipped_surrogate(log_prob, torch.zeros(4), advantages, 0.2)
    # max(-A r, -A clip(r)): max(-1.5, -1.2), max(-0.5, -0.8), max(2.2, 2.2), max(0.5, 0.8)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 2.2 + 0.8) / 4)
    assert torch.allclose(r, ratio)
    loss.backward()  # clipped terms carry no gradient; the others -A r / B
    assert torch.allclose(log_prob.grad, torch.tensor([0.0, -0.5 / 4, 2.2 / 4, 0.0]))
    with pytest.raises(ValueError, match="one shape"):
        clipped_surrogate(torch.zeros(3), torch.zeros(4), torch.zeros(4), 0.2)


