"""chunked_td3's offline-to-online options: actor started from a BC clone of its own type (chunked for h > 1,
deterministic for h = 1), critic warm-up, and the BC penalty anchored to the frozen clone; real so101_reach
demos recorded by the scripted expert, real BC checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from expert_demos import clone_demos, record_expert_demos
from test_chunked_demos import mixed_chunks

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.bc import load_clone
from robot_rl.agents.chunked_td3 import ChunkedTD3, ChunkedTD3Config
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.critics.chunked import ChunkedCriticConfig

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = {"episode_s": 1.0}  # 25 control steps at 25 Hz
HIDDEN = [32, 32]


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 scripted-expert so101_reach episodes of 25 frames."""
    return record_expert_demos(tmp_path_factory.mktemp("chunked_o2o") / "reach", "so101_reach", 4, 2, 4, SHORT)


@pytest.fixture(scope="module")
def clones(reach_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """BC checkpoints of the demos: ``chunked`` (h = 4) and ``deterministic`` (one-step)."""
    out = tmp_path_factory.mktemp("chunked_o2o_bc")
    widths = ["--hidden-dims", *map(str, HIDDEN), "--epochs", "3"]
    kinds = {"chunked": ["--actor", "chunked", "--chunk-len", "4", *widths],
             "deterministic": ["--actor", "deterministic", *widths]}
    return {k: clone_demos(reach_demos, out / k, *flags) for k, flags in kinds.items()}


def _agent(demos: Path, H: int, **kw) -> ChunkedTD3:
    torch.manual_seed(0)
    env = sim.make_env("so101_reach", num_envs=2, seed=0, **SHORT)
    cfg = ChunkedTD3Config(demos=str(demos), learning_starts=0, batch_size=32, actor_hidden_dims=HIDDEN,
                           policy_delay=1, **kw)
    return make_agent(cfg, ChunkedCriticConfig(chunk_len=H, hidden_dims=HIDDEN, layer_norm=True),
                      EnvSpec.from_env(env))


def _fill(agent: ChunkedTD3, steps: int = 8) -> None:
    env = sim.make_env("so101_reach", num_envs=2, seed=1, **SHORT)
    obs = env.reset(seed=1)
    for _ in range(steps):
        action = agent.act(obs)
        step = env.step(action)
        agent.observe(obs, action, step)
        obs = step.obs


@pytest.mark.parametrize(("H", "kind"), [(4, "chunked"), (1, "deterministic")])
def test_actor_starts_from_the_clone_of_its_own_type(reach_demos: Path, clones: dict[str, Path], H: int,
                                                     kind: str) -> None:
    bc = load_clone(clones[kind], 21, 6)
    agent = _agent(reach_demos, H, normalize_obs=True, bc_checkpoint=str(clones[kind]))
    probe = torch.randn(5, 21)
    with torch.no_grad():
        x = bc.normalizer(probe)
        expected = bc.actor(x).reshape(5, H, 6)  # the deterministic clone's [5, 6] is a chunk of one action
        torch.testing.assert_close(agent.actor(agent.normalizers["policy"](probe)), expected)
        torch.testing.assert_close(agent.actor_target(x), expected)
        torch.testing.assert_close(agent.policy()(probe), expected.flatten(1))  # the export is the whole chunk
    norm = agent.normalizers["policy"]
    assert norm.until == int(bc.normalizer.count) and torch.equal(norm.mean, bc.normalizer.mean)
    _fill(agent, 2)  # frozen: online steps do not move the clone's statistics
    assert torch.equal(norm.mean, bc.normalizer.mean)
    other = clones["deterministic" if kind == "chunked" else "chunked"]
    with pytest.raises(ValueError, match=f"this agent's actor plays {H} action"):
        _agent(reach_demos, H, normalize_obs=True, bc_checkpoint=str(other))
    with pytest.raises(ValueError, match=r"set agent\.normalize_obs=true"):
        ChunkedTD3Config(bc_checkpoint=str(clones[kind]))


def test_critic_warmup_then_the_clone_anchor_keeps_the_actor_near_the_clone(reach_demos: Path,
                                                                           clones: dict[str, Path]) -> None:
    def run(bc_weight: float) -> tuple[ChunkedTD3, list[dict[str, float]]]:
        agent = _agent(reach_demos, 4, normalize_obs=True, bc_checkpoint=str(clones["chunked"]), bc_anchor="clone",
                       bc_weight=bc_weight, critic_warmup_updates=3, actor_lr=3e-3)
        _fill(agent)
        history = []
        gen = torch.Generator().manual_seed(0)
        for _ in range(23):
            batch, n_demo = mixed_chunks(agent.buffer, agent.demo_source.buffer, 32, 4, 0.99, generator=gen)
            batch.obs, batch.next_obs = agent.normalize(batch.obs), agent.normalize(batch.next_obs)
            history.append(agent.learn(batch, n_demo))
            agent.updates += 1
        return agent, history

    anchored, history = run(100.0)
    assert all("loss/actor" not in m for m in history[:3])  # warm-up: critic only
    assert history[3]["loss/bc"] == 0.0  # the first actor step starts exactly at the clone
    assert history[-1]["loss/bc"] > 0.0
    free, free_history = run(0.0)
    assert all("loss/bc" not in m for m in free_history)
    obs = anchored.normalize({"policy": torch.randn(64, 21)})["policy"]
    with torch.no_grad():
        prior = anchored.bc_prior(obs)
        near, far = ((a.actor(obs) - prior).pow(2).sum(-1).mean() for a in (anchored, free))
    assert far > 0 and near < 0.2 * far, (near, far)  # anchored on every state, not only the demo rows


def test_checkpoint_round_trip_and_clear_errors(reach_demos: Path, clones: dict[str, Path], tmp_path: Path) -> None:
    kw = {"normalize_obs": True, "bc_checkpoint": str(clones["chunked"]), "bc_anchor": "clone", "bc_weight": 1.0,
          "critic_warmup_updates": 2, "utd_ratio": 1.0}
    agent = _agent(reach_demos, 4, **kw)
    _fill(agent, 3)
    assert agent.ready()
    assert "loss/bc" in agent.update()  # 6 updates owed: 2 critic-only, then the actor with the clone penalty
    path = save_checkpoint(tmp_path, agent.env_steps, agent.state_dict())
    again = _agent(reach_demos, 4, **kw)
    again.load_state_dict(load_checkpoint(path)[1])
    probe = torch.randn(3, 21)
    torch.testing.assert_close(again.policy()(probe), agent.policy()(probe))
    assert again.updates == agent.updates > 2
    assert ChunkedTD3Config(bc_checkpoint="x", normalize_obs=True, bc_anchor="clone", bc_weight=1.0).demos is None
    with pytest.raises(ValueError, match="bc_anchor must be one of"):
        ChunkedTD3Config(bc_anchor="teacher")
    with pytest.raises(ValueError, match=r"bc_anchor=clone needs agent\.bc_checkpoint"):
        ChunkedTD3Config(bc_anchor="clone")
    with pytest.raises(ValueError, match="critic_warmup_updates must be >= 0"):
        ChunkedTD3Config(critic_warmup_updates=-1)
