"""Stacked-parameter Q ensembles: per-member equivalence, Polyak target update, REDQ subsets."""

import pytest
import torch

from robot_rl.critics import CriticSpec, make_critic
from robot_rl.critics.ensemble import EnsembleCritic, EnsembleCriticConfig
from robot_rl.models.mlp import mlp

SPEC = CriticSpec(obs_dim=3, action_dim=2)


def _critic(**kw) -> EnsembleCritic:
    torch.manual_seed(0)
    return make_critic(EnsembleCriticConfig(hidden_dims=[16, 16], **kw), SPEC)


def test_vmapped_members_equal_plain_mlps_with_the_same_weights():
    critic = _critic(num_members=3)
    obs, action = torch.randn(7, 3), torch.randn(7, 2)
    out = critic.estimates(obs, action)
    assert out.shape == (3, 7, 1)
    x = torch.cat([obs, action], dim=-1)
    for e in range(3):
        plain = mlp(5, [16, 16], 1, "relu")
        members = critic.members
        plain.load_state_dict({
            f"{2 * i}.{name}": (w[e].T if name == "weight" else w[e, 0])
            for i in range(3)
            for name, w in (("weight", members.weights[i]), ("bias", members.biases[i]))
        })
        torch.testing.assert_close(out[e], plain(x))
    assert not torch.allclose(out[0], out[1])  # members initialised independently


def test_gradients_reach_every_member():
    critic = _critic(num_members=4)
    critic.estimates(torch.randn(5, 3), torch.randn(5, 2)).sum().backward()
    for p in critic.parameters():
        assert p.grad is not None and (p.grad.flatten(1).abs().sum(1) > 0).all()


def test_polyak_update_is_a_lerp_of_the_stacked_parameters():
    critic = _critic()
    target = critic.target_critic()
    before = [p.detach().clone() for p in target.parameters()]
    with torch.no_grad():
        for p in critic.parameters():
            p.add_(1.0)
    critic.update_target(0.25)
    for t, old, p in zip(target.parameters(), before, critic.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * old + 0.25 * p.detach())
    assert all(not p.requires_grad for p in target.parameters())
    assert len(list(critic.parameters())) == 6  # 3 stacked Linear layers; target weights excluded


def test_clipped_double_min_and_redq_random_subset():
    critic = _critic(num_members=10, subset=2)
    obs, action = torch.randn(6, 3), torch.randn(6, 2)
    all_q = critic(obs, action, reduce="none")
    torch.testing.assert_close(critic(obs, action, reduce="min"), all_q.min(0).values)
    torch.manual_seed(1)
    subset_min = critic(obs, action, reduce="random_min")  # draws critic.subset = 2 members
    torch.manual_seed(1)
    idx = torch.randperm(10)[:2]
    torch.testing.assert_close(subset_min, all_q[idx].min(0).values)
    assert (subset_min >= all_q.min(0).values).all()


def test_an_ensemble_scores_single_actions_and_refuses_chunks():
    critic = make_critic(EnsembleCriticConfig(hidden_dims=[8]), CriticSpec(obs_dim=3, action_dim=2))
    assert critic.chunk_len == 1 and critic(torch.randn(5, 3), torch.randn(5, 2), reduce="none").shape == (2, 5, 1)
    with pytest.raises(ValueError, match=r"expects actions \[B, 2\]"):
        critic(torch.randn(5, 3), torch.randn(5, 4, 2))


def test_bad_config_names_the_key():
    with pytest.raises(ValueError, match=r"critic.subset must be in \[1, num_members=2\]"):
        _critic(num_members=2, subset=3)


def test_bf16_autocast_keeps_the_output_layer_in_float32_and_matches_float32():
    """Under ``agent.amp=bf16`` hidden layers run in bfloat16, the output layer in float32."""
    critic = _critic(num_members=2)
    obs, action = torch.randn(64, 3), torch.randn(64, 2)
    exact = critic.estimates(obs, action)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = critic.estimates(obs, action)
        hidden = critic.members.act(torch.baddbmm(
            critic.members.biases[0], critic_input_stacked(obs, action), critic.members.weights[0]
        ))
    assert hidden.dtype == torch.bfloat16  # the autocast is really active for hidden layers
    assert mixed.dtype == torch.float32
    assert not torch.equal(mixed, exact)  # bf16 rounding happened ...
    torch.testing.assert_close(mixed, exact, atol=2e-2, rtol=2e-2)  # ... within bf16 precision
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = critic.estimates(obs, action).pow(2).mean()
    loss.backward()
    for p in critic.parameters():
        assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32
        assert (p.grad.flatten(1).abs().sum(1) > 0).all()


def critic_input_stacked(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``[B, D + A]`` input expanded to ``[2, B, D + A]`` for a two-member first layer."""
    return torch.cat([obs, action], dim=-1).expand(2, -1, -1)
