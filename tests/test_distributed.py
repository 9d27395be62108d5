"""Data-parallel training (robot_rl.distributed) with gloo on 2 CPU processes.

Each test spawns 2 ranks that join a real gloo process group; a rank's failed assertion fails the test.
The ranks are spawned, not forked: a fork copies the parent's threads' locks mid-use (pytest's, tqdm's monitor,
torch's pools), and a forked rank once hung in CI until the 600 s timeout.
Checked: the optimiser hook averages gradients (hand values), the normaliser pools both ranks' batches
(exact moments), PPO and SAC runners keep identical parameters across ranks while their envs differ,
and only rank 0 writes files. The ``slow`` test runs ``robot-rl train distributed.nproc=2`` end to end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pendulum_vecenv import PendulumVecEnv
from toy_vecenv import ToyReach

from robot_rl import distributed
from robot_rl.compose import compose
from robot_rl.models.normalizer import EmpiricalNormalizer
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")
WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, body, args: tuple) -> None:
    """One rank: torchrun's environment variables, then ``robot_rl.distributed.init`` (gloo) and ``body``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    assert distributed.init("cpu") == "cpu"
    try:
        assert dist.get_backend() == "gloo" and distributed.rank() == rank and distributed.is_main() == (rank == 0)
        body(rank, *args)
    finally:
        distributed.shutdown()


def _run(body, *args) -> None:
    """Run ``body(rank, *args)`` on 2 spawned gloo ranks; raises if a rank fails."""
    mp.start_processes(_rank_main, args=(_free_port(), body, args), nprocs=WORLD, start_method="spawn")


def _gathered(t: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(out, t.contiguous())
    return out


def _flat_params(modules) -> torch.Tensor:
    return torch.cat([x.detach().reshape(-1).double() for m in modules for x in [*m.parameters(), *m.buffers()]])


# --- components, hand values -----------------------------------------------------------------------


def _grad_body(rank: int) -> None:
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    v = torch.nn.Parameter(torch.tensor([3.0], dtype=torch.float64))
    frozen = torch.nn.Parameter(torch.tensor([5.0]))  # no gradient on any rank: skipped, unchanged
    opt = torch.optim.SGD([w, v, frozen], lr=1.0)
    w.grad = torch.tensor([1.0, 10.0]) * (rank + 1)  # rank 0: [1, 10], rank 1: [2, 20] -> mean [1.5, 15]
    v.grad = torch.tensor([4.0 * rank], dtype=torch.float64)  # [0], [4] -> mean [2]
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor([-0.5, -13.0]))
    torch.testing.assert_close(v.detach(), torch.tensor([1.0], dtype=torch.float64))
    torch.testing.assert_close(frozen.detach(), torch.tensor([5.0]))
    torch.testing.assert_close(distributed.all_mean(torch.tensor(2.0 + 4 * rank)), torch.tensor(4.0))


def test_optimizer_steps_average_gradients_over_ranks():
    _run(_grad_body)


def _normalizer_body(rank: int) -> None:
    gen = torch.Generator().manual_seed(0)
    batches = [[torch.randn(3, 2, generator=gen) * 2 + 1, torch.randn(5, 2, generator=gen) - 3],
               [torch.randn(4, 2, generator=gen), torch.randn(0, 2, generator=gen)]]  # round 2: rank 1 has none
    norm = EmpiricalNormalizer(2)
    for step in range(2):
        norm.update(batches[step][rank])
    union = torch.cat([batches[0][0], batches[0][1], batches[1][0]])
    assert int(norm.count) == 12
    torch.testing.assert_close(norm.mean, union.mean(0))
    torch.testing.assert_close(norm.var, union.var(0, unbiased=False))


def test_normalizer_pools_the_moments_of_every_rank():
    _run(_normalizer_body)


def test_single_process_is_the_identity():
    assert not distributed.active() and distributed.world_size() == 1 and distributed.rank_seed(7) == 7
    t = torch.tensor([1.0, 3.0])
    assert distributed.all_mean(t) is t and distributed.broadcast_object("x") == "x"
    n, mean, var = distributed.pooled_moments(torch.tensor([[1.0], [3.0]]))
    assert (n, float(mean), float(var)) == (2, 2.0, 1.0)
    assert distributed.backend_for("cpu") == "gloo" and distributed.backend_for("cuda:1") == "nccl"


# --- runners: identical parameters, per-rank envs, rank-0 files ---------------------------------------


def _factory(num_envs, seed):
    return PendulumVecEnv(num_envs, seed=seed)


def _runner_body(rank: int, root: str, runner_cls, overrides: list[str], total: int) -> None:
    cfg = compose(overrides)
    run_dir = Path(root) / f"rank{rank}"  # a directory per rank, to see who writes what
    runner = runner_cls(cfg, run_dir, env_factory=_factory)
    assert runner.seed == distributed.rank_seed(cfg.seed) and _gathered(torch.tensor(runner.seed))[1] != 0
    first_obs = runner.env.reset(seed=runner.seed)["policy"]
    a, b = _gathered(first_obs)
    assert not torch.equal(a, b)  # each rank steps its own envs
    result = runner.learn(evaluate_and_export=False)
    assert result.env_steps == total and result.updates > 0
    a, b = _gathered(_flat_params(runner.agent.networks().values()))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    files = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    if rank == 0:
        assert "config.yaml" in files and "metrics.jsonl" in files and any(f.startswith("checkpoints/") for f in files)
        steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert steps[-1] == total  # the logged env steps count both ranks' envs
    else:
        assert files == []
    # resume: every rank loads rank 0's newest checkpoint, then draws its own random numbers
    resumed = runner_cls(cfg, Path(root) / "rank0", env_factory=_factory, resume=True)
    assert resumed.env_steps == total
    torch.testing.assert_close(_flat_params(resumed.agent.networks().values()), b, rtol=0, atol=0)
    a, b = _gathered(torch.rand(4))
    assert not torch.equal(a, b)


def test_ppo_ranks_keep_identical_parameters_and_only_rank_0_writes(tmp_path):
    overrides = ["agent=ppo", "agent.num_steps_per_env=16", "agent.num_learning_epochs=2", "agent.num_mini_batches=2",
                 "agent.actor_hidden_dims=[16,16]", "critic.hidden_dims=[16,16]", "task.num_envs=4",
                 "task.total_steps=384", "checkpoint_interval=2", "logger=none", "logger.progress=false"]
    _run(_runner_body, str(tmp_path), Runner, overrides, 384)  # 3 updates of 2 ranks x 4 envs x 16 steps


def test_sac_ranks_keep_identical_parameters_and_only_rank_0_writes(tmp_path):
    overrides = ["agent=sac", "critic=ensemble", "critic.hidden_dims=[16,16]", "agent.actor_hidden_dims=[16,16]",
                 "agent.learning_starts=40", "agent.utd_ratio=0.5", "agent.batch_size=16", "agent.iteration_steps=80",
                 "agent.normalize_obs=true", "task.num_envs=4", "task.total_steps=240", "checkpoint_interval=1",
                 "logger=none", "logger.progress=false"]
    _run(_runner_body, str(tmp_path), Runner, overrides, 240)


# --- learning: 2 processes x N/2 envs against 1 process x N envs, same budget -----------------------------

TOY_OVERRIDES = ["agent=ppo", "agent.num_steps_per_env=16", "agent.actor_hidden_dims=[64,64]",
                 "critic.hidden_dims=[64,64]", "task.total_steps=61440", "eval_episodes=256", "export_formats=[]",
                 "logger=none", "logger.progress=false"]  # 60 updates of 64 envs x 16 steps


def _toy_factory(num_envs, seed):
    return ToyReach(num_envs=num_envs, seed=seed)


def _toy_body(rank: int, root: str) -> None:
    cfg = compose([*TOY_OVERRIDES, "task.num_envs=32"])
    Runner(cfg, Path(root) / "two", env_factory=_toy_factory).learn()


@pytest.mark.slow
def test_two_processes_learn_like_one_with_twice_the_envs(tmp_path):
    Runner(compose([*TOY_OVERRIDES, "task.num_envs=64"]), tmp_path / "one", env_factory=_toy_factory).learn()
    _run(_toy_body, str(tmp_path))
    one, two = (json.loads((tmp_path / d / "eval.json").read_text())["success_rate"] for d in ("one", "two"))
    assert one >= 0.9 and two >= 0.9 and abs(one - two) <= 0.1, (one, two)  # stated tolerance: 10 points


# --- end to end ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_robot_rl_train_with_two_processes_trains_resumes_and_exports(tmp_path):
    run = tmp_path / "run"
    common = ["task.num_envs=8", "agent.num_steps_per_env=8", "agent.actor_hidden_dims=[32,32]",
              "critic.hidden_dims=[32,32]", "eval_episodes=4", "logger=none", "logger.progress=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "distributed.nproc=2",
                            f"hydra.run.dir={run}", "task.total_steps=512", *common],
                           capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "data parallel: 2 processes x 8 envs (gloo)" in first.stderr
    assert "trained 512 env steps" in first.stdout and (run / "policy" / "policy.onnx").is_file()
    assert (run / "config.yaml").is_file() and (run / "eval.json").is_file()
    again = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", f"resume={run}"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trained 512 env steps" in again.stdout  # the budget was spent: resume loads it and stops


def test_bad_nproc_is_refused_with_exit_2():
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "distributed.nproc=0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "distributed.nproc = 0: must be an integer >= 1" in out.stderr
