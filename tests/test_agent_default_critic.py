"""Each off-policy agent's yaml selects its critic: `agent=sac` alone works, `critic=...` still wins,
and a combination the agent cannot train is refused naming the fix."""

import re

import pytest
import torch

from robot_rl.agents.base import EnvSpec, make_agent
from robot_rl.compose import compose
from robot_rl.config import config_class, key_of
from robot_rl.errors import InputError

SPEC = EnvSpec(num_envs=1, observation_dims={"policy": 3}, action_dim=1,
               action_low=-torch.ones(1), action_high=torch.ones(1))


@pytest.mark.parametrize(("agent", "critic", "members"), [
    ("sac", "ensemble", 2), ("td3", "ensemble", 2), ("ddpg", "ensemble", 1), ("tqc", "quantile", 5),
    ("fast_td3", "c51", 2),
])
def test_agent_alone_selects_a_critic_it_can_train(agent: str, critic: str, members: int):
    cfg = compose([f"agent={agent}", "agent.buffer_size=16"])
    assert key_of("critic", cfg.critic) == critic
    assert cfg.critic.num_members == members
    built = make_agent(cfg.agent, cfg.critic, SPEC)  # raises if the agent cannot train its default
    assert built.critic.estimates(torch.zeros(4, 3), torch.zeros(4, 1)).shape[0] == members


def test_ppo_keeps_the_mlp_value_critic():
    assert key_of("critic", compose(["agent=ppo"]).critic) == "mlp"


def test_explicit_critic_overrides_the_agent_default():
    cfg = compose(["agent=sac", "critic=redq", "critic.hidden_dims=[8]"])
    assert cfg.critic.num_members == 10 and cfg.critic.hidden_dims == [8]
    cfg = compose(["critic=ensemble", "agent=td3"])  # order on the command line does not matter
    assert key_of("critic", cfg.critic) == "ensemble" and cfg.critic.num_members == 2


@pytest.mark.parametrize(("agent", "critic", "needs"), [
    ("sac", "c51", "Q critic regressing scalar TD targets"),
    ("td3", "quantile", "Q critic regressing scalar TD targets"),
    ("tqc", "ensemble", "needs critic=quantile"),
    ("fast_td3", "quantile", "needs critic=c51"),
])
def test_wrong_combination_is_refused_with_the_fix(agent: str, critic: str, needs: str):
    # When the config is read: naming both keys and the critics the agent trains ...
    q_critics = "ensemble | ensemble_ln | flow | mlp | multi"
    allowed = {"sac": q_critics, "td3": q_critics, "tqc": "quantile", "fast_td3": "c51"}[agent]
    with pytest.raises(InputError, match=rf"critic = '{critic}': agent={agent} cannot train this critic; it "
                       rf"trains critic={re.escape(allowed)}"):
        compose([f"agent={agent}", f"critic={critic}", "agent.buffer_size=16"])
    # ... and again when the agent is built from config objects made without that check.
    agent_cfg, critic_cfg = config_class("agent", agent)(buffer_size=16), config_class("critic", critic)()
    with pytest.raises(ValueError, match=f"agent={agent} cannot train critic={critic}") as err:
        make_agent(agent_cfg, critic_cfg, SPEC)
    assert needs in str(err.value) and f"Leave critic= out to get agent={agent}'s default" in str(err.value)
