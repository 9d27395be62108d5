"""Every off-policy agent gets the template's machinery: mixed precision, exact resume and export.

One test per agent key (``configs/agent``), built from its own config file with tiny networks: a short run under
``agent.amp=bf16`` (bf16 autocast on the CPU) learns with finite metrics and lands elsewhere than the float32 run
of the same seed (autocast reached the update); a checkpoint written through safetensors and read back makes a
fresh agent continue exactly as the one that wrote it; ``policy()`` exports an artifact the torch-free runtime
loads and that plays the policy's actions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from agent_loop import drive
from expert_demos import record_expert_demos
from toy_vecenv import ToyReach

import sim
from robot_rl.agents import EnvSpec, make_agent
from robot_rl.agents.off_policy import OffPolicyAgent
from robot_rl.checkpoint import load_checkpoint, save_checkpoint
from robot_rl.compose import compose
from robot_rl.deploy.runtime import PolicyRuntime
from robot_rl.export import PolicyHead, export_policy, make_meta

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = {"episode_s": 1.0}  # so101_reach episodes of 25 control steps
TINY = ["agent.actor_hidden_dims=[16]", "agent.batch_size=16", "agent.learning_starts=32", "agent.buffer_size=2000",
        "agent.utd_ratio=0.5", "agent.checkpoint_buffer=true"]
AGENTS = {  # agent key -> its tiny critic settings
    "sac": ["critic.hidden_dims=[16]"],
    "td3": ["critic.hidden_dims=[16]"],
    "ddpg": ["critic.hidden_dims=[16]"],
    "tqc": ["critic.hidden_dims=[16]"],
    "fast_td3": ["critic.hidden_dims=[16]"],
    "rlpd": ["critic.hidden_dims=[16]", "agent.normalize_obs=true"],
    "bc": ["critic.hidden_dims=[16]", "agent.actor=chunked", "agent.chunk_len=3"],
    "chunked_td3": ["critic.hidden_dims=[16]", "critic.chunk_len=3", "agent.execute_len=2", "agent.normalize_obs=true"],
    "tdmpc": ["critic.hidden_dims=[16]", "critic.latent_dim=8", "agent.plan.samples=16", "agent.plan.elites=4",
              "agent.plan.iterations=1", "agent.plan.policy_samples=4"],
}

DEMO_AGENTS = ("rlpd", "bc")


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 scripted-expert so101_reach episodes for the demo agents (RLPD's partition, BC's replay)."""
    return record_expert_demos(tmp_path_factory.mktemp("template") / "reach", "so101_reach", 2, 2, 4, SHORT)


def make_env(key: str, seed: int):
    """The demo agents (RLPD, BC) run on the task their demos were recorded on; the others on the toy reach."""
    if key in DEMO_AGENTS:
        return sim.make_env("so101_reach", num_envs=2, seed=seed, **SHORT)
    return ToyReach(num_envs=4, seed=seed)


def build(key: str, env, demos: Path, *extra: str) -> OffPolicyAgent:
    """``agent=key`` from its config file with tiny networks, seeded."""
    overrides = [f"agent={key}", *TINY, *AGENTS[key], *extra]
    if key in DEMO_AGENTS:
        overrides.append(f"agent.demos={demos}")
    cfg = compose(overrides)
    torch.manual_seed(0)
    agent = make_agent(cfg.agent, cfg.critic, EnvSpec.from_env(env))
    assert isinstance(agent, OffPolicyAgent)
    return agent


def continue_run(agent: OffPolicyAgent, key: str, steps: int) -> dict:
    """``steps`` more vector steps on a fresh env, seeded the same for every call; returns the last metrics."""
    torch.manual_seed(1)
    return drive(agent, make_env(key, seed=3), steps, seed=3)[1]


def assert_same_state(a: dict, b: dict, where: str = "") -> None:
    """Two nested state dicts hold equal tensors and scalars."""
    assert a.keys() == b.keys(), where
    for k in a:
        if isinstance(a[k], dict):
            assert_same_state(a[k], b[k], f"{where}/{k}")
        elif isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), f"{where}/{k}"
        else:
            assert a[k] == b[k], f"{where}/{k}"


@pytest.mark.parametrize("key", list(AGENTS))
def test_every_off_policy_agent_runs_in_bf16_resumes_exactly_and_exports(key: str, reach_demos: Path,
                                                                          tmp_path: Path) -> None:
    # Mixed precision: the bf16 run learns with finite metrics and rounds differently from the float32 one.
    runs = {}
    for amp in ("none", "bf16"):
        agent = build(key, make_env(key, seed=0), reach_demos, f"agent.amp={amp}")
        _, metrics = drive(agent, make_env(key, seed=0), 24)
        assert agent.updates > 0 and all(np.isfinite(float(v)) for v in metrics.values()), (amp, metrics)
        runs[amp] = agent
    actor = {k: v for k, v in runs["none"].actor.state_dict().items() if v.is_floating_point()}
    assert any(not torch.equal(v, runs["bf16"].actor.state_dict()[k]) for k, v in actor.items())

    # Resume: a fresh agent loading the checkpoint continues exactly as the writer does after loading it too
    # (which drops what a checkpoint does not hold, e.g. chunks in flight, on both sides alike).
    writer = runs["bf16"]
    path = save_checkpoint(tmp_path / "run", writer.env_steps, writer.state_dict())
    _, state = load_checkpoint(path)
    reader = build(key, make_env(key, seed=0), reach_demos, "agent.amp=bf16")
    reader.load_state_dict(state)
    writer.load_state_dict(load_checkpoint(path)[1])  # its own copy: a loaded optimiser keeps the loaded tensors
    assert_same_state(reader.state_dict(), writer.state_dict())
    continue_run(writer, key, 12)
    continue_run(reader, key, 12)
    assert reader.updates > int(state["counters"]["updates"])
    assert_same_state(reader.state_dict(), writer.state_dict())

    # Export: the artifact loads in the torch-free runtime and plays the policy's (chunk of) actions.
    policy = writer.policy()
    H, execution = writer.policy_chunking()
    env = make_env(key, seed=0)
    D, A = env.observation_dims["policy"], env.action_dim
    layout = env.observation_layout["policy"] if key in DEMO_AGENTS else [("joint_pos", D, 1.0)]  # toy: any D values
    meta = make_meta("toy", [f"j{i}" for i in range(A)], [0.0] * A, layout, 1.0, 20, chunk_length=H,
                     chunk_execution=execution)
    out = export_policy(PolicyHead(policy, meta), meta, tmp_path / "policy", formats=["onnx"])
    runtime = PolicyRuntime(out)
    obs = torch.randn(D)
    with torch.no_grad():
        expected = policy(obs[None]).reshape(H, A).numpy()
    expected = np.clip(expected, runtime.meta.action.clip_low, runtime.meta.action.clip_high)
    np.testing.assert_allclose(runtime.infer(obs.numpy()), expected, atol=1e-5)
