"""The critic interface PPO (and every agent) uses: shapes, reductions, target copies, registry."""

import pytest
import torch

from robot_rl.critics import Critic, CriticSpec, critic_keys, make_critic, reduce_members
from robot_rl.critics.mlp import MLPCriticConfig


def test_reduce_members_by_hand():
    values = torch.tensor([[[1.0]], [[3.0]], [[2.0]]])  # [E=3, B=1, G=1]
    assert reduce_members(values, "mean").item() == 2.0 and reduce_members(values, "min").item() == 1.0
    assert reduce_members(values, "none").shape == (3, 1, 1)
    assert reduce_members(values, "random_min", subset=3).item() == 1.0
    with pytest.raises(ValueError, match="subset"):
        reduce_members(values, "random_min", subset=4)
    with pytest.raises(ValueError, match="unknown reduce 'max'"):
        reduce_members(values, "max")


def test_v_and_q_shapes_and_action_checks():
    v = make_critic(MLPCriticConfig(hidden_dims=[8]), CriticSpec(obs_dim=5, num_values=3))
    assert not v.takes_action and v(torch.randn(4, 5)).shape == (4, 3)
    with pytest.raises(ValueError, match="V critic"):
        v(torch.randn(4, 5), torch.randn(4, 2))
    q1 = make_critic(MLPCriticConfig(hidden_dims=[8]), CriticSpec(obs_dim=5, action_dim=2))
    with pytest.raises(ValueError, match=r"expects actions \[B, 2\]"):
        q1(torch.randn(4, 5), torch.randn(4, 4, 2))
    assert q1(torch.randn(4, 5), torch.randn(4, 1, 2)).shape == (4, 1)  # [B, 1, A] squeezed


def test_target_copy_polyak_and_isolation():
    c = make_critic(MLPCriticConfig(hidden_dims=[8], normalize_obs=False), CriticSpec(obs_dim=3))
    n_params = len(list(c.parameters()))
    before = [p.detach().clone() for p in c.target_critic().parameters()]
    assert len(list(c.parameters())) == n_params  # the target is not a submodule
    with torch.no_grad():
        for p in c.parameters():
            p.add_(1.0)
    c.update_target(0.25)
    for t, b in zip(c.target_critic().parameters(), before, strict=True):
        torch.testing.assert_close(t, b + 0.25)
    c.update_target(1.0)
    x = torch.randn(2, 3)
    torch.testing.assert_close(c(x, target=True), c(x))
    assert set(c.target_state_dict()) == set(c.state_dict())
    with pytest.raises(ValueError, match="tau"):
        c.update_target(0.0)


def test_family_kinds_and_registry_errors():
    class VOnly(Critic):
        kinds = frozenset({"V"})

        def estimates(self, obs, action=None):
            return obs.sum(-1, keepdim=True).unsqueeze(0)

    with pytest.raises(ValueError, match="cannot be a Q critic"):
        VOnly(CriticSpec(obs_dim=2, action_dim=1))
    assert "mlp" in critic_keys()
    with pytest.raises(KeyError, match="not a registered critic config"):
        make_critic(object(), CriticSpec(obs_dim=2))
    with pytest.raises(ValueError, match="obs_dim"):
        CriticSpec(obs_dim=0)
