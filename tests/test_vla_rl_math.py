"""The method cores of VLA post-training with critics (docs/vla.md, "RL post-training: the method cores"):
flow-PPO's stochastic sampler and chain likelihoods, DSRL's noise steering, critic-guided flow, best-of-N chunks,
against hand values, Monte-Carlo estimates and toy bandits."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robot_rl.critics.base import CriticSpec
from robot_rl.critics.chunked import ChunkedCritic, ChunkedCriticConfig
from robot_rl.math import flow_sde
from robot_rl.math.ppo_objective import clipped_surrogate
from robot_rl.math.soft_actor_critic import actor_loss, soft_target, squashed_gaussian, temperature_loss
from robot_rl.math.td_targets import nstep_return
from robot_rl.models.mlp import mlp
from robot_rl.models.vla import VLA, Context, VLAConfig, flow
from robot_rl.models.vla.best_of_n import best_of_n, distill_loss, rank_candidates, repeat_obs
from robot_rl.models.vla.guided_flow import action_gradient, guided_action, guided_flow_loss
from robot_rl.models.vla.steering import NoiseActor, context_feature, context_feature_dim, steer


# ---------------------------------------------------------------- toys
class BimodalFlow:
    """The exact flow of a two-armed bandit: chunks ``+1`` or ``-1`` with probability 1/2 each.

    With ``a`` in {-1, +1}, ``E[a | x_t] = tanh(x (1 - t) / t^2)`` and the velocity ``E[n - a | x_t]`` is
    ``(x - E[a | x_t]) / t``; Euler from t = 1 sends noise of either sign to the arm of that sign.
    """

    @staticmethod
    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(-1, *([1] * (x.dim() - 1)))
        return (x - torch.tanh(x * (1 - t) / t.pow(2))) / t

    def sample(self, obs: dict, noise: torch.Tensor) -> torch.Tensor:
        return flow.euler_sample(self.velocity, noise, 10)


class ToyFlow(nn.Module):
    """A trainable one-dimensional flow policy (MLP over ``(x, t)``) with the VLA's ``sample`` / ``loss`` calls;
    observations are ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(2, [64, 64], 1, "silu")

    def velocity(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x.flatten(1), t[:, None]], 1)).view_as(x)

    def sample(self, obs: dict, noise: torch.Tensor) -> torch.Tensor:
        return flow.euler_sample(self.velocity, noise, 10)

    def loss(self, obs: dict, action: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
             action_is_pad: torch.Tensor | None = None) -> torch.Tensor:
        return flow.flow_loss(self.velocity(flow.interpolate(action, noise, t), t), action, noise)


def tiny_vla(**overrides) -> tuple[VLA, dict]:
    torch.manual_seed(0)
    config = VLAConfig.cpu(state_dim=3, action_dim=2, vocab_size=20, chunk_len=4, max_text_len=6, width=16, heads=2,
                           prefix_layers=1, expert_layers=1, conv_channels=(4, 8), image_grid=2, num_steps=4,
                           **overrides)
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
    assert chain.states.shape == (5, 7, 2) and chain.log_probs is None is chain.log_prob
    assert torch.equal(chain.states[:, 0], noise)
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
    assert torch.allclose(chain.log_prob, chain.log_probs.sum(1))
    loss, ratio = clipped_surrogate(again.sum(1), chain.log_prob, torch.randn(8), 0.2)
    assert torch.allclose(ratio, torch.ones(8), atol=1e-5)
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    if callable(noise):
        assert all(p.grad is not None for p in std_net.parameters())


def test_one_sde_step_chains_are_euler_elsewhere_and_score_that_step() -> None:
    """``sde_step``: the chosen step is the flow-SDE's Gaussian step, every other is Euler's; ``log_probs`` is 0
    except there; :func:`step_log_prob` gives that step's elementwise likelihood (its sum = the chain's), ratio 1
    under the same field; a chain whose one step is its last ends within that step's std of the Euler sample."""
    torch.manual_seed(0)
    net = mlp(3, [16], 2, "tanh")
    velocity = lambda x, t: net(torch.cat([x, t[:, None]], 1))  # noqa: E731
    noise, step = torch.randn(6, 2), torch.tensor([0, 1, 2, 3, 4, 2])
    with torch.no_grad():
        chain = flow_sde.sample_chain(velocity, noise, 5, 0.5, torch.Generator().manual_seed(1), sde_step=step)
        euler = flow_sde.sample_chain(velocity, noise, 5, 0.0)
    for b, k in enumerate(step.tolist()):  # identical to Euler up to the stochastic step, different after it
        assert torch.equal(chain.states[b, : k + 1], euler.states[b, : k + 1])
        assert not torch.allclose(chain.states[b, k + 1], euler.states[b, k + 1])
        assert (chain.log_probs[b] != 0).tolist() == [i == k for i in range(5)]
        x = chain.states[b, k]
        t = flow_sde.step_times(5, 1)[k]
        mean, std = flow_sde.step_distribution(x[None], velocity(x[None], t), t, 0.2, 0.5)
        z = (chain.states[b, k + 1] - mean[0]) / std[0]
        hand = -(0.5 * z.pow(2) + std[0].log() + 0.5 * math.log(2 * math.pi))
        assert torch.allclose(flow_sde.step_log_prob(velocity, chain.states, 0.5, step)[b], hand, atol=1e-6)
    element = flow_sde.step_log_prob(velocity, chain.states, 0.5, step)
    assert element.shape == (6, 2) and torch.allclose(element.sum(1), chain.log_prob, atol=1e-5)
    assert torch.allclose(chain.log_prob, flow_sde.chain_log_prob(velocity, chain.states, 0.5).gather(
        1, step[:, None])[:, 0], atol=1e-5)  # the whole-chain scorer agrees at that step
    _, ratio = clipped_surrogate(element.flatten(), element.detach().flatten(), torch.randn(12), 0.2)
    assert torch.allclose(ratio, torch.ones(12))
    element.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    with pytest.raises(ValueError, match="noise > 0"):
        flow_sde.step_log_prob(velocity, chain.states, 0.0, step)


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


@pytest.mark.parametrize("sde_step", ["all", "one"])
def test_flow_ppo_moves_a_bimodal_flow_policy_to_the_paying_arm(sde_step: str) -> None:
    """agent=vla_ppo's update on a two-armed bandit: a flow fitted to chunks +-1 (half each) is fine-tuned by PPO
    on its flow-SDE chains' likelihoods (reward +1 for the + arm, -1 else): the whole chain's (``sde_step=all``) or,
    with one uniformly drawn Gaussian step per chain, that step's per-element one (``one``); its Euler samples from
    N(0, 1) noise go from about half to over 90% on the + arm."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    policy = ToyFlow()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    for _ in range(400):  # supervised flow matching on the +-1 arms
        a = torch.randint(0, 2, (128, 1), generator=g).float() * 2 - 1
        loss = policy.loss({}, a, torch.randn(128, 1, generator=g), flow.sample_time(128, generator=g))
        opt.zero_grad()
        loss.backward()
        opt.step()

    def plus_arm() -> float:
        with torch.no_grad():
            return (policy.sample({}, torch.randn(512, 1, generator=g)) > 0).float().mean().item()

    def log_prob(chain: flow_sde.Chain, step: torch.Tensor | None) -> torch.Tensor:
        if step is None:
            return flow_sde.chain_log_prob(policy.velocity, chain.states, 0.5).sum(1)
        return flow_sde.step_log_prob(policy.velocity, chain.states, 0.5, step).flatten()

    before = plus_arm()
    assert 0.35 < before < 0.65
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for _ in range(60):
        step = torch.randint(0, 10, (128,), generator=g) if sde_step == "one" else None
        with torch.no_grad():
            chain = flow_sde.sample_chain(policy.velocity, torch.randn(128, 1, generator=g), 10, 0.5, g, step)
            old = log_prob(chain, step)
        reward = torch.where(chain.sample[:, 0] > 0, 1.0, -1.0)
        advantages = (reward - reward.mean()) / (reward.std() + 1e-8)
        for _ in range(4):
            loss, _ = clipped_surrogate(log_prob(chain, step), old, advantages, 0.2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert plus_arm() > 0.9 > before


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


# ---------------------------------------------------------------- DSRL
def test_sac_math_hand_values() -> None:
    y, lp = squashed_gaussian(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), bound=2.0)
    assert torch.equal(y, torch.zeros(1, 2))
    assert lp.item() == pytest.approx(2 * (-0.5 * math.log(2 * math.pi) - math.log(2)))
    # u = 0.5 + 0.5 * 1 = 1: torch's own tanh-then-scale density of y
    y, lp = squashed_gaussian(torch.tensor([[0.5]]), torch.tensor([[math.log(0.5)]]), torch.ones(1, 1), bound=1.5)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(0.5, 0.5),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(0.0, 1.5)])
    assert y.item() == pytest.approx(1.5 * math.tanh(1.0)) and lp.item() == pytest.approx(reference.log_prob(y).item())
    # u = -3 - 8 = -11, tanh saturated: still finite, log N(u) - log 1.5 - log(1 - tanh(u)^2) by hand
    y, lp = squashed_gaussian(torch.tensor([[-3.0]]), torch.zeros(1, 1), torch.full((1, 1), -8.0), bound=1.5)
    assert lp.item() == pytest.approx(-32 - 0.5 * math.log(2 * math.pi) - math.log(1.5)
                                      - 2 * (math.log(2) - 11 - math.log1p(math.exp(-22))), rel=1e-6)
    target = soft_target(torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.0]), torch.tensor([2.0, 5.0]),
                         torch.tensor([-1.0, 3.0]), 0.5)
    assert torch.allclose(target, torch.tensor([3.25, 0.0]))
    assert torch.allclose(soft_target(torch.ones(1), torch.full((1,), 0.9), torch.full((1,), 2.0), torch.ones(1), 0.5,
                                      backup_entropy=False), torch.tensor([2.8]))
    assert actor_loss(torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 0.0]), 0.5).item() == pytest.approx(-1.75)
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    loss = temperature_loss(log_alpha, torch.tensor([-1.0, -3.0]), -2.0)
    loss.backward()
    assert loss.item() == pytest.approx(4 * math.log(0.5)) and log_alpha.grad.item() == pytest.approx(4.0)


def test_context_feature_is_the_mean_of_unpadded_tokens() -> None:
    tokens = torch.tensor([[[1.0, 2.0], [100.0, 100.0], [3.0, 6.0]]])
    feature = context_feature(Context(tokens, torch.tensor([[False, True, False]])))
    assert torch.equal(feature, torch.tensor([[2.0, 4.0]]))
    conditioned = context_feature(Context(tokens, torch.tensor([[False, True, False]]), torch.tensor([[7.0, 8.0]])))
    assert torch.equal(conditioned, torch.tensor([[2.0, 4.0, 7.0, 8.0]]))  # the global condition after the mean


@pytest.mark.parametrize("overrides", [{}, {"global_condition": True, "action_expert": "mlp"}])
def test_the_feature_width_is_what_the_vla_gives(overrides: dict) -> None:
    vla, obs = tiny_vla(**overrides)
    with torch.no_grad():
        context = vla.encode(obs)
    assert context_feature(context).shape == (2, context_feature_dim(vla))
    assert context_feature_dim(vla) == (32 if overrides else 16)


def test_steering_changes_only_the_noise_and_leaves_the_vla_frozen() -> None:
    vla, obs = tiny_vla()
    before = {k: v.clone() for k, v in vla.state_dict().items()}
    with torch.no_grad():
        feature = context_feature(vla.encode(obs))
    actor = NoiseActor(feature.shape[1], 4, 2, bound=1.5, hidden_dims=(32,))
    steered = steer(vla, obs, actor, feature, generator=torch.Generator().manual_seed(0))
    assert steered.noise.shape == steered.chunk.shape == (2, 4, 2) and steered.log_prob.shape == (2,)
    assert steered.noise.abs().max() < 1.5 and not steered.chunk.requires_grad
    with torch.no_grad():
        assert torch.equal(steered.chunk, vla.sample(obs, steered.noise))
        assert not torch.allclose(steered.chunk, vla.sample(obs, -steered.noise))  # the noise does matter
    optimizer = torch.optim.Adam(actor.parameters(), lr=0.1)
    actor_loss(-(steered.noise - 1.0).pow(2).flatten(1).sum(1), steered.log_prob, 0.1).backward()
    assert all(p.grad is None for p in vla.parameters())
    assert all(p.grad is not None for p in actor.parameters())
    optimizer.step()
    after = steer(vla, obs, actor, feature, deterministic=True)
    assert after.log_prob is None and not torch.allclose(after.noise, steered.noise)
    with torch.no_grad():
        assert torch.equal(after.chunk, vla.sample(obs, actor(feature)))
    assert all(torch.equal(v, before[k]) for k, v in vla.state_dict().items())
    with pytest.raises(ValueError, match="bound"):
        NoiseActor(4, 2, 1, bound=0.0)


def test_dsrl_moves_the_noise_to_the_better_arm_of_each_context() -> None:
    """Contextual two-armed bandit in noise space: context 0 pays for the +1 arm, context 1 for the -1 arm."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    decoder = BimodalFlow()
    actor = NoiseActor(2, 1, 1, bound=2.0, hidden_dims=(32, 32))
    critic = ChunkedCritic(CriticSpec(obs_dim=2, action_dim=1), ChunkedCriticConfig(chunk_len=1, hidden_dims=[32, 32]))
    log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
    optimizers = [torch.optim.Adam(m, lr=3e-3) for m in (actor.parameters(), critic.parameters(), [log_alpha])]
    features = torch.eye(2)
    arm = torch.tensor([1.0, -1.0])

    def success(deterministic: bool) -> float:
        steered = steer(decoder, {}, actor, features.repeat(256, 1), deterministic, g)
        return (steered.chunk.flatten() * arm.repeat(256) > 0).float().mean().item()

    assert 0.3 < success(False) < 0.7
    for _ in range(300):
        context = torch.randint(0, 2, (64,), generator=g)
        steered = steer(decoder, {}, actor, features[context], generator=g)
        reward = steered.chunk.flatten() * arm[context]  # +-1 near each arm
        ended = torch.ones(64, 1, dtype=torch.bool)  # one-step episodes: discount 0, target = reward
        window = nstep_return(reward[:, None], ended, torch.zeros_like(ended), 0.99)
        target = soft_target(window.returns, window.discount, torch.zeros(64), torch.zeros(64), log_alpha.exp())
        loss, _ = critic.loss(features[context], steered.noise.detach(), target[:, None])
        loss_actor = actor_loss(critic(features[context], steered.noise).squeeze(-1), steered.log_prob,
                                log_alpha.exp().detach())
        loss_alpha = temperature_loss(log_alpha, steered.log_prob, -1.0)
        for o in optimizers:
            o.zero_grad()
        loss.backward(inputs=list(critic.parameters()))
        (loss_actor + loss_alpha).backward(inputs=[*actor.parameters(), log_alpha])
        for o in optimizers:
            o.step()
    assert success(True) == 1.0 and success(False) > 0.9


def test_rank_candidates_hand_values() -> None:
    candidates = torch.tensor([[[0.0], [2.0], [1.0]], [[-1.0], [0.5], [3.0]]])  # [B=2, N=3, K=1]
    best, value, values = rank_candidates(lambda c: -(c - 1.0).abs().squeeze(-1), candidates)
    assert best.tolist() == [[1.0], [0.5]] and value.tolist() == [0.0, -0.5]
    assert values.tolist() == [[-1.0, -1.0, 0.0], [-2.0, -0.5, -2.0]]
    with pytest.raises(ValueError, match="score must return"):
        rank_candidates(lambda c: c.sum(-1).T, candidates)


def test_noise_space_best_of_n_moves_the_actor_to_the_better_arm_of_each_context() -> None:
    """agent=vla_rl method=best_of_n on the contextual bandit above: the critic ranks the actor's noise and 7 draws
    of N(0, 1), the decoded best is played, the critic regresses the reward and the actor is distilled onto the
    best candidate; the deterministic (deployed) actor ends on the paying arm of both contexts."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    decoder = BimodalFlow()
    actor = NoiseActor(2, 1, 1, bound=2.0, hidden_dims=(32, 32))
    critic = ChunkedCritic(CriticSpec(obs_dim=2, action_dim=1), ChunkedCriticConfig(chunk_len=1, hidden_dims=[32, 32]))
    actor_opt, critic_opt = (torch.optim.Adam(m.parameters(), lr=3e-3) for m in (actor, critic))
    features, arm = torch.eye(2), torch.tensor([1.0, -1.0])

    def success() -> float:
        with torch.no_grad():
            chunk = decoder.sample({}, actor(features))
        return (chunk.flatten() * arm > 0).float().mean().item()

    def best(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            drawn = torch.randn(len(obs), 7, 1, generator=g).clamp(-2.0, 2.0)
            candidates = torch.cat([actor(obs).flatten(1).unsqueeze(1), drawn], dim=1)
        n = candidates.shape[1]
        return rank_candidates(lambda c: critic(obs.repeat_interleave(n, 0), c.flatten(0, 1)).view(len(obs), n),
                               candidates)[0]

    assert success() == 0.5  # the initial actor's noise decodes to one arm for both contexts
    for _ in range(300):
        context = torch.randint(0, 2, (64,), generator=g)
        noise = best(features[context])
        reward = decoder.sample({}, noise.view(64, 1, 1)).flatten() * arm[context]
        loss, _ = critic.loss(features[context], noise, reward[:, None])  # one-step episodes: target = reward
        critic_opt.zero_grad()
        loss.backward()
        critic_opt.step()
        target = best(features[context])
        distill = (actor(features[context]).flatten(1) - target).pow(2).mean()
        actor_opt.zero_grad()
        distill.backward()
        actor_opt.step()
    assert success() == 1.0


# ---------------------------------------------------------------- critic-guided flow
class Quadratic(nn.Module):
    """``Q(a) = -scale * (a - center)^2`` summed over the sample; a critic with parameters (that must get no grad)."""

    def __init__(self, center: float, scale: float) -> None:
        super().__init__()
        self.center, self.scale = nn.Parameter(torch.tensor(center)), scale

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return -self.scale * (a - self.center).pow(2).flatten(1).sum(1)


def test_weighted_flow_loss_hand_values() -> None:
    """Zero predicted velocity, zero noise: each sample's squared error is its action squared (1 and 4, and 9 in the
    masked-out step); the weighted mean is sum(w * err) / sum(w) over kept elements, 0 when every weight is 0."""
    predicted, noise = torch.zeros(2, 2, 1), torch.zeros(2, 2, 1)
    action = torch.tensor([[[1.0], [3.0]], [[2.0], [3.0]]])
    mask = torch.tensor([[True, False], [True, False]])
    assert flow.flow_loss(predicted, action, noise, mask).item() == pytest.approx(2.5)
    assert flow.flow_loss(predicted, action, noise, mask, torch.tensor([1.0, 0.0])).item() == pytest.approx(1.0)
    assert flow.flow_loss(predicted, action, noise, mask, torch.tensor([3.0, 1.0])).item() == pytest.approx(7 / 4)
    assert flow.flow_loss(predicted, action, noise, mask, torch.zeros(2)).item() == 0.0
    assert flow.flow_loss(predicted, action, noise, None, torch.tensor([0.0, 1.0])).item() == pytest.approx(6.5)


def test_guided_flow_loss_hand_values_and_minimiser() -> None:
    q = Quadratic(2.0, 1.0)
    a = torch.zeros(1, 1)
    grad = action_gradient(q, a)  # -2 (a - 2) = 4
    assert grad.item() == pytest.approx(4.0) and q.center.grad is None and not grad.requires_grad
    assert guided_action(a, grad, 0.25).item() == pytest.approx(1.0)
    assert guided_action(a, grad, 0.25, normalize=True).item() == pytest.approx(0.25)  # unit step along g
    shifted, noise, t = guided_action(a, grad, 0.25), torch.tensor([[0.5]]), torch.tensor([0.5])
    theta = torch.zeros(1, requires_grad=True)
    seen = []

    def velocity(x, t):
        seen.append(x)
        return theta.expand_as(x)

    loss, parts = guided_flow_loss(velocity, lambda x, t: torch.ones_like(x), shifted, noise, t, beta=1.0)
    # x_t' = 0.5 * 0.5 + 0.5 * 1 = 0.75; target n - a' = -0.5; trust to v_sft = 1: (0 + 0.5)^2 + 1 * (0 - 1)^2
    assert seen[0].item() == pytest.approx(0.75)
    assert loss.item() == pytest.approx(1.25) and parts["flow"].item() == pytest.approx(0.25)
    assert parts["trust"].item() == pytest.approx(1.0)
    with torch.no_grad():
        theta.fill_((-0.5 + 1.0 * 1.0) / 2.0)  # the minimiser ((n - a') + beta * v_sft) / (1 + beta) = 0.25
    loss, _ = guided_flow_loss(velocity, lambda x, t: torch.ones_like(x), shifted, noise, t, beta=1.0)
    (dtheta,) = torch.autograd.grad(loss, theta)
    assert loss.item() == pytest.approx(0.75**2 + 1.0 * 0.75**2) and dtheta.item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize(("beta", "expected"), [(0.0, 1.0), (1.0, 0.5)])
def test_guided_flow_moves_samples_toward_the_q_maximum_by_the_stated_amount(beta, expected) -> None:
    """Data: the point chunk a = 0, whose exact SFT field is x / t. Q(a) = -(a - 2)^2 / 2 (gradient 2 - a),
    eta = 0.5: a' = 1. The flow family v_m(x, t) = (x - m) / t holds every point target's exact field, and the
    loss's minimiser is m = a' / (1 + beta): samples move from 0 to 1 (beta = 0) or 0.5 (beta = 1)."""
    g = torch.Generator().manual_seed(0)
    m = torch.zeros(1, requires_grad=True)
    velocity = lambda x, t: (x - m) / t[:, None]  # noqa: E731
    sft = lambda x, t: x / t[:, None]  # noqa: E731
    q = Quadratic(2.0, 0.5)
    optimizer = torch.optim.Adam([m], lr=0.02)
    for step in range(300):
        a = torch.zeros(64, 1)
        shifted = guided_action(a, action_gradient(q, a), 0.5)
        t = 0.1 + 0.9 * torch.rand(64, generator=g)  # the Euler grid's range (the loss weighs samples by 1 / t^2)
        loss, _ = guided_flow_loss(velocity, sft, shifted, torch.randn(64, 1, generator=g), t, beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 200:
            for group in optimizer.param_groups:
                group["lr"] = 0.002
    with torch.no_grad():
        samples = flow.euler_sample(velocity, torch.randn(1000, 1, generator=g), 10)
    assert samples.mean().item() == pytest.approx(expected, abs=0.02)
    assert samples.std().item() < 1e-4  # Euler is exact on this linear field: every noise lands on m


# ---------------------------------------------------------------- best-of-N
def test_best_of_n_batches_one_sample_call_and_picks_the_critics_argmax() -> None:
    vla, obs = tiny_vla()
    noise = torch.randn(2, 3, 4, 2, generator=torch.Generator().manual_seed(0))
    score = lambda chunks: chunks.flatten(2).sum(2)  # noqa: E731
    best = best_of_n(vla, obs, noise, score)
    assert best.chunk.shape == best.noise.shape == (2, 4, 2) and best.values.shape == (2, 3)
    with torch.no_grad():
        for b in range(2):
            single = {"images": {"front": obs["images"]["front"][b:b + 1]},
                      **{k: obs[k][b:b + 1] for k in ("tokens", "token_mask", "state")}}
            values = torch.stack([score(vla.sample(single, noise[b, i:i + 1])[None])[0, 0] for i in range(3)])
            assert torch.allclose(best.values[b], values, atol=1e-5)
            assert best.index[b] == values.argmax() and torch.equal(best.noise[b], noise[b, best.index[b]])
            assert torch.allclose(best.chunk[b], vla.sample(single, best.noise[b:b + 1])[0], atol=1e-5)
    repeated = repeat_obs(obs, 3)
    assert torch.equal(repeated["images"]["front"][3:6], obs["images"]["front"][1:2].expand(3, -1, -1, -1))
    with pytest.raises(ValueError, match="score must return"):
        best_of_n(vla, obs, noise, lambda chunks: chunks.sum((2, 3)).flatten())


def test_best_of_n_picks_the_better_arm_and_distillation_moves_the_flow_to_it() -> None:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    # selection: the exact two-armed flow, the critic pays +1 for the +1 arm; with 8 candidates the best is found
    # wherever one of them is positive (all but 2^-8 of the observations)
    best = best_of_n(BimodalFlow(), {}, torch.randn(256, 8, 1, 1, generator=g), lambda c: c.flatten(1, 3).mul(1.0))
    found = (best.values > 0).any(1)
    assert found.float().mean() > 0.98
    assert torch.allclose(best.chunk.flatten()[found], torch.ones(int(found.sum())), atol=0.05)
    assert (best.noise.flatten()[found] > 0).all()
    # distillation: a tiny flow first fit to both arms (SFT), then trained on its own best-of-8 chunks
    policy = ToyFlow()
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)

    def fit(action: torch.Tensor) -> None:
        loss = policy.loss({}, action, torch.randn(action.shape, generator=g), flow.sample_time(action.shape[0], g))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def positive() -> float:
        with torch.no_grad():
            return (policy.sample({}, torch.randn(1000, 1, 1, generator=g)) > 0).float().mean().item()

    for _ in range(300):
        fit(torch.randint(0, 2, (128, 1, 1), generator=g).float() * 2 - 1)
    before = positive()
    for _ in range(150):
        chosen = best_of_n(policy, {}, torch.randn(128, 8, 1, 1, generator=g), lambda c: c.flatten(1, 3))
        loss = distill_loss(policy, {}, chosen, torch.randn(128, 1, 1, generator=g), flow.sample_time(128, g))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert 0.3 < before < 0.7 and positive() > 0.95
