"""The measuring logic of the peer benchmarks, on hand-made runs (no training).

- ``benchmarks/ppo_vs_rsl_rl.py``: the recorder's "to X% success" (window of the last ``num_envs`` finished
  episodes, wall/CPU/env steps at the first finished batch reaching the threshold), the summed ratios over
  seeds, the rows, the rsl_rl adapter's conversions and what the printout says differs;
- ``benchmarks/sac_vs_sb3.py``: the training clock that leaves evaluations out, the seed means and the ours/peer
  ratio table with its targets, jax's thread variables, the missing-peer error, the sbx-vs-SB3 settings diff, and
  (where sbx is installed, the ``[peers]`` extra) one short real run of the sbx arm;
- ``benchmarks/agent_update_time.py``: the median CPU time of the timed calls, warm-up left out.

Clocks are replaced by scripted ones so every figure is a hand value.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from bench_scripts import BENCHMARKS, load, scripted_clock

import sim
from robot_rl.errors import InputError

ppo = load("ppo_vs_rsl_rl")
sac = load("sac_vs_sb3")
update_time = load("agent_update_time")


class ScriptedEpisodes(sim.VecEnv):
    """Fake VecEnv (the benchmarks' real envs need training-length runs): two envs whose episode ends and
    successes follow a script, one ``(terminated, truncated, success)`` triple of ``[2]`` lists per step."""

    def __init__(self, script: list[tuple[list[bool], list[bool], list[bool]]]) -> None:
        self.num_envs, self.device, self.dt, self.max_episode_steps = 2, torch.device("cpu"), 0.02, 5
        self.action_dim = 1
        self.action_low, self.action_high = -torch.ones(1), torch.ones(1)
        self.observation_dims, self.reward_groups = {"policy": 3, "critic": 4}, ("task",)
        self.observation_layout, self.robot = {"policy": [("x", 3, 1.0)]}, None
        self.script, self.actions = list(script), []

    def _obs(self, value: float) -> sim.Obs:
        return {"policy": torch.full((2, 3), value), "critic": torch.full((2, 4), value)}

    def reset(self, seed: int | None = None) -> sim.Obs:
        return self._obs(0.0)

    def step(self, action: torch.Tensor) -> sim.Step:
        self.actions.append(action.clone())
        terminated, truncated, success = (torch.tensor(x) for x in self.script.pop(0))
        info = {"success": success, "final_obs": self._obs(0.0), "log": {}}
        return sim.Step(self._obs(float(len(self.actions))), torch.ones(2), terminated, truncated, info)


NO, YES = [False, False], [True, True]


def test_recorder_reports_the_first_finished_batch_whose_window_reaches_the_threshold(monkeypatch) -> None:
    env = ScriptedEpisodes([
        (NO, NO, NO),                   # nothing finishes: no point
        ([True, False], NO, NO),        # env 0 fails: window [F] -> 0.0 at 4 env steps
        (NO, YES, YES),                 # both succeed: window [T, T] -> 1.0 at 6
        (NO, [False, True], NO),        # env 1 times out unsuccessful: window [T, F] -> 0.5 at 8
    ])
    monkeypatch.setattr(ppo, "time", scripted_clock(monotonic=[100.0, 103.0, 107.0, 110.0],
                                                    process_time=[10.0, 11.0, 12.5, 13.0]))
    rec = ppo.Recorder(env)
    for _ in range(4):
        rec.step(torch.zeros(2, 1))
    assert rec.curve == [(3.0, 1.0, 4, 0.0), (7.0, 2.5, 6, 1.0), (10.0, 3.0, 8, 0.5)]
    assert rec.reached(0.9) == (7.0, 2.5, 6)  # wall s, CPU s, env steps since the first step
    assert rec.reached(0.0) == (3.0, 1.0, 4)
    assert rec.reached(1.01) is None


def _side(hit: tuple[float, float, int] | None) -> dict:
    return {"hit": hit, "wall": 200.0, "cpu": 150.0, "sps": 1000.0, "train": 0.9, "load": 2.0,
            "eval": {"success_rate": 0.9, "success_ci95": (0.8, 0.95)}}


def test_ratios_are_summed_over_the_seeds_where_both_sides_reached_the_threshold() -> None:
    results = {0: {"robot_rl": _side((80.0, 70.0, 800)), "rsl_rl": _side((160.0, 140.0, 1600))},
               1: {"robot_rl": _side((60.0, 60.0, 600)), "rsl_rl": _side(None)},  # left out: rsl_rl never got there
               2: {"robot_rl": _side((100.0, 90.0, 1000)), "rsl_rl": _side((40.0, 35.0, 400))}}
    assert ppo.hit_ratios(list(results.values())) == pytest.approx((180 / 200, 160 / 175, 1800 / 2000))
    assert ppo.hit_ratios([results[0]]) == pytest.approx((0.5, 0.5, 0.5))
    assert ppo.hit_ratios([results[1]]) is None
    rows = ppo.result_rows(results)
    assert [(r["seed"], r["side"], r["to_threshold_env_steps"]) for r in rows] == [
        (0, "robot_rl", 800), (0, "rsl_rl", 1600), (1, "robot_rl", 600), (1, "rsl_rl", None),
        (2, "robot_rl", 1000), (2, "rsl_rl", 400)]
    assert rows[3]["to_threshold_wall_s"] is None and rows[0]["eval"]["success_ci95"] == (0.8, 0.95)


def test_rsl_adapter_hands_rsl_rl_tensordicts_clamped_actions_and_time_outs() -> None:
    pytest.importorskip("rsl_rl")
    env = ScriptedEpisodes([(NO, NO, NO), ([True, False], [False, True], NO), (NO, NO, NO)])
    adapter = ppo.make_rsl_env(ppo.Recorder(env))
    obs = adapter.get_observations()
    assert obs.batch_size == torch.Size([2]) and obs["policy"].shape == (2, 3) and obs["critic"].shape == (2, 4)
    assert (adapter.num_envs, adapter.num_actions, adapter.max_episode_length) == (2, 1, 5)
    td, reward, done, extras = adapter.step(torch.tensor([[3.0], [-0.5]]))
    assert env.actions[0].tolist() == [[1.0], [-0.5]]  # clamped to the action bounds before the env
    assert float(td["policy"][0, 0]) == 1.0 and reward.tolist() == [1.0, 1.0]
    assert done.dtype == torch.long and adapter.episode_length_buf.tolist() == [1, 1]
    _, _, done, extras = adapter.step(torch.zeros(2, 1))
    assert done.tolist() == [1, 1] and extras["time_outs"].tolist() == [False, True]  # env 1 truncated
    assert adapter.episode_length_buf.tolist() == [0, 0]  # both episodes restart


def test_rsl_config_carries_our_hyperparameters_and_the_printout_names_the_options_rsl_rl_lacks() -> None:
    from robot_rl.compose import compose

    size = ["task=so101_reach", "agent=ppo", "task.total_steps=2000000", "task.num_envs=128",
            "agent.num_steps_per_env=24"]
    cfg = compose(size)
    rsl = ppo.rsl_train_cfg(cfg)
    assert rsl["num_steps_per_env"] == 24 and rsl["algorithm"]["learning_rate"] == cfg.agent.learning_rate
    assert rsl["algorithm"]["desired_kl"] == cfg.agent.desired_kl
    assert rsl["actor"]["distribution_cfg"]["init_std"] == cfg.agent.init_noise_std
    assert rsl["critic"]["hidden_dims"] == list(cfg.critic.hidden_dims)
    text = ppo.describe(cfg)
    assert "updates robot_rl 651 / rsl_rl 652" in text  # 2M steps: ceil(2e6 / 128) // 24 vs ceil(2e6 / 3072)
    assert cfg.agent.critic_learning_rate is not None and cfg.agent.normalize_rewards  # ppo.yaml's defaults
    assert "robot_rl only: critic lr 0.001 fixed" in text and "reward scaling" in text
    assert "torch threads during updates" not in text  # ppo.yaml: update_threads 0
    assert "robot_rl only" in ppo.describe(compose([*size, "agent.update_threads=2"]))
    assert "2 torch threads during updates" in ppo.describe(compose([*size, "agent.update_threads=2"]))
    bare = ppo.describe(compose([*size, "agent.critic_learning_rate=null", "agent.normalize_rewards=false",
                                 "agent.update_threads=0"]))
    assert "robot_rl only" not in bare  # rsl_rl's algorithm on both sides


def test_sac_clock_leaves_evaluations_out_of_training_time(monkeypatch) -> None:
    # start at (0, 0); an evaluation from (10, 8) to (25, 20); read at (30, 26): 15 s wall, 14 s CPU trained
    monkeypatch.setattr(sac, "time", scripted_clock(perf_counter=[0.0, 10.0, 25.0, 30.0],
                                                    process_time=[0.0, 8.0, 20.0, 26.0]))
    clock = sac.Clock()
    clock.start()
    assert clock.exclude(lambda: 1234.5) == 1234.5  # the evaluation's result passes through
    assert clock.read() == (15.0, 14.0)


def test_sac_summary_means_seeds_and_tables_every_ours_peer_ratio_against_its_target() -> None:
    results = {"ours-fp32": {0: (14.0, 10.0, 1000.0), 1: (16.0, 12.0, 1400.0)},   # means 15, 11, 1200
               "ours-bf16": {0: (8.0, 6.0, 900.0), 1: (12.0, 8.0, 1100.0)},     # means 10, 7, 1000
               "sb3": {0: (40.0, 30.0, 1000.0), 1: (40.0, 30.0, 1000.0)},       # std 0
               "sbx": {0: (20.0, 15.0, 1100.0), 1: (20.0, 15.0, 1300.0)}}       # means 20, 15, 1200; std 141.4
    out = sac.summary(results)
    assert out["means"]["ours-fp32"] == (15.0, 11.0, 1200.0) and out["means"]["sbx"] == (20.0, 15.0, 1200.0)
    assert out["return_std"]["sb3"] == 0.0 and out["return_std"]["sbx"] == pytest.approx(math.sqrt(20000))
    r = out["ratios"]
    assert list(r) == ["ours-fp32/sbx", "ours-bf16/sbx", "ours-fp32/sb3", "ours-bf16/sb3"]
    fp32_sbx, bf16_sbx = r["ours-fp32/sbx"], r["ours-bf16/sbx"]
    assert (fp32_sbx["wall"], fp32_sbx["cpu"], fp32_sbx["return_diff"]) == (0.75, 11 / 15, 0.0)
    assert fp32_sbx["target"] == 0.7 and fp32_sbx["equal_return"] and not fp32_sbx["met"]  # 0.75 > 0.7
    # half sbx's wall, but 200 below sbx's return, more than its seed std (1000 < 1200 - 141.4)
    assert bf16_sbx["wall"] == 0.5 and not bf16_sbx["equal_return"] and not bf16_sbx["met"]
    assert r["ours-bf16/sb3"]["wall"] == 0.25 and r["ours-bf16/sb3"]["equal_return"] and r["ours-bf16/sb3"]["met"]
    assert r["ours-fp32/sb3"] == {"wall": 0.375, "cpu": 11 / 30, "return_diff": 200.0, "equal_return": True,
                                  "target": 0.5, "met": True}
    seeds = sac.seed_rows(results, out["means"], steps=1000)
    assert seeds[1].split() == ["0", "ours-fp32", "14.0", "10.0", "14.00", "1000.0"]  # 14 s / 1000 steps = 14 ms
    assert seeds[5].split()[:2] == ["1", "ours-fp32"] and seeds[-1].split() == ["mean", "sbx", "20.0", "15.0",
                                                                                "20.00", "1200.0"]
    ratios = sac.ratio_rows(out)
    assert ratios[1].split() == ["ours-fp32/sbx", "0.75", "0.73", "+0.0", "141.4", "<=", "0.7", "no", "-"]
    assert ratios[4].split() == ["ours-bf16/sb3", "0.25", "0.23", "+0.0", "0.0", "<=", "0.5", "yes", "-"]


def test_sac_summary_of_a_subset_compares_only_the_arms_present_and_one_seed_has_no_spread() -> None:
    out = sac.summary({"ours-bf16": {3: (6.0, 6.0, 500.0)}, "sbx": {3: (10.0, 8.0, 500.0)}})
    assert list(out["ratios"]) == ["ours-bf16/sbx"] and out["return_std"]["sbx"] == 0.0
    assert out["ratios"]["ours-bf16/sbx"]["met"]  # 0.6 <= 0.7, equal return
    assert sac.summary({"sb3": {0: (1.0, 1.0, 1.0)}})["ratios"] == {}


def test_sac_update_products_match_a_hand_count_on_tiny_networks() -> None:
    floor = load("_matmul_floor")
    # obs 2, action 1, hidden [3], 2 critics, batch 4: actor 2 -> 3 -> 2 (mean, log-std), critic 3 -> 3 -> 1
    assert floor.forward([3, 3, 1], 4) == [(4, 3, 3), (4, 3, 1)]
    # weight gradients of both layers, the input gradient of the second only (the batch needs none)
    assert floor.backward([3, 3, 1], 4, weights=True, input_grad=False) == [(3, 4, 3), (1, 4, 3), (4, 1, 3)]
    assert floor.backward([3, 3, 1], 4, weights=False, input_grad=True) == [(4, 3, 3), (4, 1, 3)]
    products = floor.sac_update_products(2, 1, [3], members=2, batch=4)
    # target 48 + 2 x 48; critic step 2 x (48 + 60); actor step 48 + 2 x 48 + 2 x 48 + 72 (by hand)
    assert floor.multiply_adds(products) == 144 + 216 + 312
    assert len(products) == (2 + 2 * 2) + 2 * (2 + 3) + (2 + 2 * 2 + 2 * 2 + 3)
    ms = floor.floor_ms(products, torch.float32, repeats=2)
    assert math.isfinite(ms) and ms > 0


def test_sac_ratios_carry_the_arithmetic_floor_over_the_peers_wall() -> None:
    results = {"ours-bf16": {0: (8.0, 6.0, 900.0)}, "sbx": {0: (20.0, 15.0, 900.0)}}
    out = sac.summary(results, floor_s={"ours-fp32": 16.0, "ours-bf16": 9.0})
    assert out["ratios"]["ours-bf16/sbx"]["floor"] == 0.45  # 9 s of products / sbx's 20 s
    assert sac.ratio_rows(out)[1].split()[-1] == "0.45"
    assert sac.ratio_rows(sac.summary(results))[1].split()[-1] == "-"


def test_jax_threads_are_pinned_through_nproc_and_xla_flags() -> None:
    assert sac.jax_thread_env(1) == {"NPROC": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
                                     "JAX_PLATFORMS": "cpu"}
    assert sac.jax_thread_env(1, "--xla_dump_to=/tmp/x")["XLA_FLAGS"] == (
        "--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=false")  # the user's flags are kept
    assert sac.jax_thread_env(4, "--xla_dump_to=/tmp/x") == {"NPROC": "4", "XLA_FLAGS": "--xla_dump_to=/tmp/x",
                                                             "JAX_PLATFORMS": "cpu"}


def test_a_missing_peer_is_an_input_error_naming_its_install_command(monkeypatch, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sbx" else real(name, *a))
    sac.check_installed(["ours-fp32", "sb3"])  # present: no error
    with pytest.raises(InputError, match=r"sbx is not installed.*pip install -e \"\.\[peers\]\""):
        sac.check_installed(["ours-bf16", "sbx"])
    monkeypatch.setattr(sys, "argv", ["sac_vs_sb3.py", "--libraries", "sbx", "ours-fp32"])
    with pytest.raises(SystemExit) as exit_info:
        sac.main()
    assert exit_info.value.code == 2 and 'pip install -e ".[peers]"' in capsys.readouterr().err


def test_sac_setting_differences_name_each_key_with_both_values() -> None:
    assert sac.setting_differences({"tau": 0.005, "n_critics": 2}, {"tau": 0.005, "n_critics": 2}) == []
    assert sac.setting_differences({"tau": 0.01, "net": [64]}, {"tau": 0.005, "gamma": 0.99}) == [
        "gamma: sbx None vs sb3 0.99", "net: sbx [64] vs sb3 None", "tau: sbx 0.01 vs sb3 0.005"]


SBX_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import sac_vs_sb3 as sac
settings = sac.describe_sbx(steps=300, learning_starts=100)
wall, cpu, ret = sac.run_peer("sbx", steps=300, seed=0, learning_starts=100, eval_episodes=1, eval_every=0)
print("RESULT " + json.dumps([settings, wall, cpu, ret]))
"""


@pytest.mark.skipif(importlib.util.find_spec("sbx") is None,
                    reason='sbx is not installed (the [peers] extra: pip install -e ".[peers]")')
def test_sbx_arm_trains_a_short_run_with_sb3s_settings() -> None:
    """In its own process: importing JAX sets up absl logging, whose handler closes the stream it was given (here
    pytest's capture file) when a later in-process Hydra run (the fuzz cases' ``robot-rl train``) reconfigures
    logging; pytest then crashed reading that test's captured output ("I/O operation on closed file")."""
    env = {**os.environ, **sac.jax_thread_env(1)}  # in effect when jax is first imported by that process
    done = subprocess.run([sys.executable, "-c", SBX_RUN, str(BENCHMARKS)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    settings, wall, cpu, ret = json.loads(result.removeprefix("RESULT "))
    assert "sbx vs SB3 settings: identical" in settings
    assert wall > 0 and cpu > 0 and math.isfinite(ret)
    assert abs(ret) < 100  # 200 updates: near-zero actions, no running yet (full actions would cost -600)


def test_update_time_is_the_median_cpu_ms_of_the_timed_calls_after_the_warm_up(monkeypatch) -> None:
    calls = []
    # three timed calls take 2, 10 and 4 ms of CPU; the three warm-up calls read no clock
    monkeypatch.setattr(update_time, "time", scripted_clock(process_time=[0.0, 0.002, 1.0, 1.010, 2.0, 2.004]))
    ms = update_time._median_ms(lambda: calls.append(1), updates=3)
    assert len(calls) == 6 and math.isclose(ms, 4.0)
