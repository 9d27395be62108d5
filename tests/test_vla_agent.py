"""agent=vla: offline SFT under `robot-rl train`, exact resume, bad input, evaluation per instruction in sim.

One tiny so101_reach_lang dataset (6 scripted episodes of 1 s, front camera at 32x32) is recorded per module.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bench_scripts import load

from robot_rl.agents.vla import VLAAgent
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint
from robot_rl.compose import compose
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.errors import InputError
from robot_rl.train.evaluation import evaluate, playable
from robot_rl.train.run_loading import open_run
from robot_rl.train.runner import Runner

pytestmark = pytest.mark.render

TINY = ["agent=vla", "task=so101_reach_lang", "task.env.cameras=[front]", "task.env.image_size=32",
        "task.env.camera_obs=false", "+task.env.episode_s=1.0", "task.num_envs=4", "agent.cameras=[front]",
        "agent.chunk_len=4", "agent.execute_len=2", "agent.batch_size=16", "agent.warmup_updates=0",
        "agent.log_interval=10", "checkpoint_interval=1", "eval_episodes=0", "export_formats=[]",
        "sim.num_threads=1", "logger=none"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vla_agent") / "reach_lang"
    record("so101_reach_lang", expert_policy, root, 6, None, num_envs=3, seed=0,
           overrides={"episode_s": 1.0, "cameras": ["front"], "image_size": 32})
    return root


@pytest.fixture(scope="module")
def tiny_run(dataset: Path, tmp_path_factory) -> Path:
    """A run of 10 gradient steps (enough for the evaluation plumbing)."""
    run = tmp_path_factory.mktemp("vla_run") / "run"
    Runner(config(dataset, "agent.updates=10"), run).learn(evaluate_and_export=False)
    return run


def config(dataset: Path, *extra: str):
    return compose([*TINY, f"agent.dataset={dataset}", *extra])


def test_sft_through_the_command_lowers_the_flow_loss_and_evaluates_per_target(dataset: Path, tmp_path: Path) -> None:
    """`robot-rl train agent=vla` for 150 steps: the flow loss falls below half its first logged value (measured
    2.0 -> 0.8), progress is counted in gradient steps, and the final evaluation reports each colour."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", *TINY, f"agent.dataset={dataset}",
                           "agent.updates=150", "agent.lr=2e-3", "eval_episodes=4", f"hydra.run.dir={run}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trained 150 gradient steps" in done.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/flow"] for r in rows if "loss/flow" in r]
    assert len(losses) == 15 and losses[-1] < 0.5 * losses[0], losses
    summary = json.loads((run / "eval.json").read_text())
    assert summary["episodes"] == 4 and sum(t["episodes"] for t in summary["success_by_target"].values()) == 4
    state = load_checkpoint(latest_checkpoint(run))[1]
    assert state["runner"]["env_steps"] == 150 and state["agent"]["num_updates"] == 150
    assert state["agent"]["tokenizer"].lstrip().startswith("{")  # the tokenizer as JSON text


def test_resume_mid_run_continues_exactly(dataset: Path, tmp_path: Path) -> None:
    """40 steps straight vs 20, a restart from that checkpoint, 20 more: same weights, optimiser and counters (the
    state noise and shift drawn from the saved batch generator too)."""
    cfg = config(dataset, "agent.updates=40", "agent.state_noise=0.05", "agent.state_shift=0.02")
    straight = tmp_path / "straight"
    Runner(cfg, straight).learn(evaluate_and_export=False)
    broken = tmp_path / "broken"
    shutil.copytree(straight, broken)
    for ckpt in sorted((broken / "checkpoints").iterdir())[-2:]:  # keep step 20: as if killed after it
        shutil.rmtree(ckpt)
    assert latest_checkpoint(broken).name.endswith("20")
    resumed = Runner(cfg, broken, resume=True)
    assert resumed.env_steps == 20 and resumed.agent.num_updates == 20
    resumed.learn(evaluate_and_export=False)
    a = load_checkpoint(latest_checkpoint(straight))[1]
    b = load_checkpoint(latest_checkpoint(broken))[1]
    assert b["runner"]["env_steps"] == 40 and b["agent"]["num_updates"] == 40
    for key, value in a["agent"]["model"].items():
        assert torch.equal(value, b["agent"]["model"][key]), key
    for k, slot in a["agent"]["optimizer"]["state"].items():
        assert torch.equal(slot["exp_avg"], b["agent"]["optimizer"]["state"][k]["exp_avg"])
    assert a["agent"]["tokenizer"] == b["agent"]["tokenizer"]


def test_the_keypoint_losses_are_trained_and_logged(dataset: Path, tmp_path: Path) -> None:
    """``agent.target_keypoint`` / ``gripper_keypoint``: the recorded ``sim.target`` and the gripper (forward
    kinematics of the recorded joints) projected into the front camera pull the first two FiLM keypoints; the logged
    losses fall (measured target 0.43 -> 0.06, gripper 0.42 -> 0.16 in 80 steps)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    run = tmp_path / "run"
    runner = Runner(config(dataset, "agent.updates=80", "agent.lr=3e-3", "agent.image_encoder=efficientnet_lite0_film",
                           "agent.target_keypoint=1.0", "agent.gripper_keypoint=1.0"), run)
    assert runner.agent.model_config.image_keypoints == 4
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for point in ("target", "gripper"):
        loss = [r[f"loss/keypoint_{point}"] for r in rows if f"loss/keypoint_{point}" in r]
        assert len(loss) == 8 and loss[-1] < 0.5 * loss[0], (point, loss)
    batches = runner.agent.load_batches()
    batch = batches.batch(torch.tensor([0, 7, 40]))
    assert batch["target"].shape == (3, 1, 2, 2) and batch["target"].abs().max() <= 1.0  # [B, C, P, 2], in frame
    env = runner.env_factory(1, 0)
    gripper = env.image_position(env.site_positions(batch["state"], "end_effector"), "front")
    assert torch.allclose(batch["target"][:, 0, 1], gripper)
    env = runner.env_factory(3, 1000)  # what benchmarks/vla_diagnose.py measures on fresh scenes
    env.reset()
    found = load("vla_diagnose").keypoint_error(runner.agent, env)["front"]
    assert 0 <= found["median_keypoint_error_px"] < 32 * 1.5 and 0 <= found["median_centre_error_px"] <= 16 * 1.5
    with pytest.raises(InputError, match="target_keypoint"):
        Runner(config(dataset, "agent.target_keypoint=1.0"), tmp_path / "conv")  # conv has no keypoint to pull
    with pytest.raises(InputError, match="fewer than the 2 supervised keypoints"):
        Runner(config(dataset, "agent.image_encoder=efficientnet_lite0_film", "agent.target_keypoint=1.0",
                      "agent.gripper_keypoint=1.0", "agent.image_keypoints=1"), tmp_path / "one")
    with pytest.raises(InputError, match="world position"):
        Runner(config(dataset, "agent.image_encoder=efficientnet_lite0_film", "agent.target_keypoint=1.0",
                      "agent.target_key=observation.state"), tmp_path / "key")
    no_world_camera = dataclasses.replace(runner.agent.env, world_cameras=(), image_position=None)
    with pytest.raises(InputError, match="world-fixed camera"):
        VLAAgent(runner.agent.cfg, None, no_world_camera)


def test_state_shift_moves_the_state_and_its_anchor_and_keeps_the_absolute_targets(dataset: Path,
                                                                                   tmp_path: Path) -> None:
    """``agent.state_shift``: the model is handed the batch's frames with the state shifted by Gaussian noise of that
    size (read and anchored alike: no ``state_seen``) and the demonstration's absolute action targets unchanged."""
    runner = Runner(config(dataset, "agent.updates=1", "agent.state_shift=0.1"), tmp_path / "run")
    agent = runner.agent
    agent.batches = agent.load_batches()
    before = agent.generator.get_state()
    seen = {}

    def losses(obs, action, *args):
        seen.update(obs=obs, action=action)
        return original(obs, action, *args)

    original, agent.model.losses = agent.model.losses, losses
    agent.update()
    replay = torch.Generator()
    replay.set_state(before)
    frames = agent.batches.sample(agent.cfg.batch_size, replay, agent.frame_weights, 0)
    assert torch.equal(seen["action"], frames["action"]) and "state_seen" not in seen["obs"]
    shift = seen["obs"]["state"] - frames["state"]
    assert 0.07 < shift.std().item() < 0.13 and shift.abs().min() > 0  # N(0, 0.1^2) on every entry


def test_expert_updates_freeze_the_keypoint_head_and_resume_exactly(dataset: Path, tmp_path: Path) -> None:
    """``agent.expert_updates``: after ``updates`` joint steps the keypoints of every frame are computed once by the
    frozen head, which changes no more, while the rest trains (the expert's weights move, no keypoint loss is
    logged); the schedule restarts; a resume inside that phase rebuilds the
    cache and continues exactly."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    cfg = config(dataset, "agent.updates=20", "agent.expert_updates=20", "agent.image_encoder=efficientnet_lite0_film",
                 "agent.image_keypoints=1", "agent.target_keypoint=1.0")
    straight = tmp_path / "straight"
    runner = Runner(cfg, straight)
    runner.learn(evaluate_and_export=False)
    agent = runner.agent
    assert agent.num_updates == 40 and agent.batches.keypoints.shape == (len(agent.batches), 1, 1, 2)
    rows = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    assert ["loss/keypoint_target" in r for r in rows] == [True, True, False, False]
    assert rows[2]["lr"] > rows[1]["lr"]  # the schedule starts again for the expert phase
    steps = sorted((straight / "checkpoints").iterdir())
    joint, final = (load_checkpoint(c)[1]["agent"]["model"] for c in (steps[1], steps[-1]))  # steps 20 and 40
    head = [k for k in final if k.startswith(("image_encoder.inp", "image_encoder.film", "image_encoder.logits",
                                              "image_encoder.log_temperature", "token_embed"))]
    assert len(head) == 8 and all(torch.equal(joint[k], final[k]) for k in head)
    index = torch.arange(0, len(agent.batches), 7)
    with torch.no_grad():  # what the trained policy sees is what its expert was trained on
        live = agent.model.eval().keypoints(agent.load_batches().batch(index))
    assert torch.allclose(live, agent.batches.keypoints[index], atol=1e-6)
    assert not torch.equal(joint["state_proj.weight"], final["state_proj.weight"])
    assert not torch.equal(joint["action_out.1.weight"], final["action_out.1.weight"])
    broken = tmp_path / "broken"  # killed after step 30, inside the expert phase
    shutil.copytree(straight, broken)
    shutil.rmtree(sorted((broken / "checkpoints").iterdir())[-1])
    resumed = Runner(cfg, broken, resume=True)
    assert resumed.agent.num_updates == 30
    resumed.learn(evaluate_and_export=False)
    again = load_checkpoint(latest_checkpoint(broken))[1]["agent"]["model"]
    for key, value in final.items():
        assert torch.equal(value, again[key]), key
    with pytest.raises(InputError, match="expert_updates"):
        Runner(config(dataset, "agent.expert_updates=10"), tmp_path / "conv")  # conv: no keypoint head to freeze


def test_the_learning_rate_schedule_hand_values() -> None:
    """Warm-up, cosine over ``updates``, and the restarted cosine over ``expert_updates``."""
    from robot_rl.agents.vla import VLAAgentConfig, learning_rate

    cfg = VLAAgentConfig(dataset="x", lr=1.0, updates=12, warmup_updates=2, expert_updates=8,
                         image_encoder="efficientnet_lite0_film")
    assert [learning_rate(cfg, u) for u in (0, 1, 2, 7)] == pytest.approx([0.5, 1.0, 1.0, 0.5])
    assert learning_rate(cfg, 11) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.9)))
    assert [learning_rate(cfg, u) for u in (12, 16, 20)] == pytest.approx([1.0, 0.5, 0.0])


def _without_policy_actions(dataset: Path, root: Path) -> Path:
    """A copy of ``dataset`` without ``action.policy``: joint targets (``action``) only, as a dataset recorded over
    ROS 2 or by another tool has."""
    import pyarrow.parquet as pq

    shutil.copytree(dataset, root)
    for file in (root / "data").rglob("*.parquet"):
        pq.write_table(pq.read_table(file).drop_columns(["action.policy"]), file)
    info = json.loads((root / "meta" / "info.json").read_text())
    del info["features"]["action.policy"]
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root


def test_a_dataset_of_joint_targets_trains_through_the_robots_action_map(dataset: Path, tmp_path: Path) -> None:
    """``agent.action_key=action`` on a dataset without ``action.policy``: the joint targets (rad) come out of the
    env's action map as actions that command the very targets recorded (max error < 1e-5; the same actions the
    recorder took wherever its target was not clamped at a joint limit), with their own statistics, and the agent
    trains on them; the default key on that dataset is refused naming the fix."""
    from robot_rl.data.lerobot import LeRobotDataset
    from robot_rl.demos.sim_io import actuator_targets

    targets_only = _without_policy_actions(dataset, tmp_path / "targets_only")
    with pytest.raises(InputError, match="lacks the action feature") as refused:
        Runner(config(targets_only, "agent.updates=1"), tmp_path / "a")
    assert "agent.action_key=action" in str(refused.value)
    runner = Runner(config(targets_only, "agent.updates=4", "agent.action_key=action"), tmp_path / "b")
    batches = runner.agent.load_batches()
    recorded = LeRobotDataset(dataset)
    actions = torch.tensor(recorded.column("action.policy"), dtype=torch.float32)
    targets = torch.tensor(recorded.column("action"), dtype=torch.float32)
    assert batches.action.shape == actions.shape
    assert (actuator_targets(runner.env, batches.action) - targets).abs().max() < 1e-5
    lower = torch.tensor([j.lower for j in runner.env.robot.joints]) + 1e-4
    upper = torch.tensor([j.upper for j in runner.env.robot.joints]) - 1e-4
    unclamped = ((targets > lower) & (targets < upper)).all(1)  # rows whose targets no joint limit cut
    assert unclamped.float().mean() > 0.5
    assert (batches.action[unclamped] - actions[unclamped]).abs().max() < 1e-5
    assert torch.allclose(batches.stats["action"]["mean"], batches.action.mean(0), atol=1e-6)
    assert torch.allclose(batches.stats["action"]["std"], batches.action.std(0, unbiased=False), atol=1e-6)
    runner.learn(evaluate_and_export=False)
    assert runner.agent.num_updates == 4


def test_bad_input_is_a_clear_input_error(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no camera the policy needs"):
        Runner(config(dataset, "agent.cameras=[wrist]", "task.env.cameras=[wrist]"), tmp_path / "a")
    with pytest.raises(InputError, match="needs a dataset"):
        Runner(compose(TINY), tmp_path / "b")
    with pytest.raises(InputError, match="state_noise"):
        Runner(config(dataset, "agent.state_noise=-0.1"), tmp_path / "d")
    with pytest.raises(InputError, match="state_shift"):
        Runner(config(dataset, "agent.state_shift=nan"), tmp_path / "h")
    with pytest.raises(InputError, match="film_stride"):
        Runner(config(dataset, "agent.film_stride=3"), tmp_path / "e")
    with pytest.raises(InputError, match="execution"):
        Runner(config(dataset, "agent.execution=ensemble"), tmp_path / "g")
    with pytest.raises(InputError, match="global_condition=true"):
        Runner(config(dataset, "agent.action_expert=mlp"), tmp_path / "f")
    runner = Runner(config(dataset, "agent.updates=1"), tmp_path / "c")
    policy = runner.agent.policy()
    image = {"front": torch.zeros(1, 3, 32, 32, dtype=torch.uint8)}
    state = torch.zeros(1, 6)
    text = "reach the red target"
    assert policy.act(image, [text], state).shape == (1, 4, 6)
    with pytest.raises(InputError, match="empty instruction"):
        policy.act(image, [" "], state)
    with pytest.raises(InputError, match="unknown instruction"):
        policy.act(image, ["reach the purple target"], state)
    with pytest.raises(InputError, match="wrong image"):
        policy.act({"front": torch.zeros(1, 3, 64, 64, dtype=torch.uint8)}, [text], state)
    with pytest.raises(InputError, match="camera image the policy needs is missing"):
        policy.act({}, [text], state)


def test_evaluation_per_instruction_and_the_wrong_instruction_switch(tiny_run: Path) -> None:
    """The same episode seeds told the named and a shifted instruction: each env's policy input names the next
    colour, while the env still scores (and the result groups by) the named one."""
    runner = open_run(tiny_run, num_envs=4)
    env = runner.env_factory(4, 123)
    told: list[list[str]] = []
    starts = []
    for shift in (0, 1):
        starts.append(len(told))
        player = playable(runner.agent, instruction_shift=shift)
        original = player.policy.act

        def spy(images, texts, state, noise=None, _original=original):
            told.append(list(texts))
            return _original(images, texts, state, noise)

        player.policy.act = spy
        result = evaluate(player, env, 4, seed=123, on_done=player.reset)
        assert len(result.targets) == 4 and set(result.summary()["success_by_target"]) <= {"red", "green", "blue",
                                                                                              "yellow"}
    colours = ["red", "green", "blue", "yellow"]
    right, wrong = told[starts[0]], told[starts[1]]  # the first query of each: every env, same episodes
    for a, b in zip(right, wrong, strict=True):
        ka = next(k for k, c in enumerate(colours) if c in a.split())
        assert b.replace(colours[(ka + 1) % 4], colours[ka]) == a  # same paraphrase, the next colour


def test_a_sampled_noise_evaluation_decodes_seeded_scaled_noise(tiny_run: Path, tmp_path: Path, capsys) -> None:
    """``--noise-scale``: by default every chunk is decoded from zero noise (the deployed policy); with S > 0 from
    ``S * N(0, I)`` drawn from the evaluation's seed (the same draws at two scales, S times each); an artifact or
    a non-VLA run is refused with the flag named."""
    from robot_rl.cli import main

    runner = open_run(tiny_run, num_envs=2)
    env = runner.env_factory(2, 7)
    given: dict[float, list[torch.Tensor | None]] = {}
    for scale in (0.0, 0.5, 1.0):
        player = playable(runner.agent, noise_scale=scale, seed=7)
        original, seen = player.policy.act, given.setdefault(scale, [])

        def spy(images, texts, state, noise=None, _original=original, _seen=seen):
            _seen.append(noise)
            return _original(images, texts, state, noise)

        player.policy.act = spy
        evaluate(player, env, 2, seed=7, on_done=player.reset)
    assert given[0.0] and all(noise is None for noise in given[0.0])  # VLAPolicy.act decodes zeros
    assert len(given[0.5]) == len(given[1.0]) and given[1.0][0].abs().mean() > 0.5
    assert all(torch.allclose(half, 0.5 * full) for half, full in zip(given[0.5], given[1.0], strict=True))
    with pytest.raises(InputError, match="noise-scale"):
        playable(runner.agent, noise_scale=-1.0)
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "policy.yaml").write_text("kind: vla\n")
    assert main(["eval", str(artifact), "--noise-scale", "1"]) == 2
    assert "--noise-scale evaluates a VLA run" in capsys.readouterr().err


def test_the_noise_scale_benchmark_evaluates_each_scale_on_the_same_episodes(tiny_run: Path, tmp_path: Path) -> None:
    """benchmarks/vla_noise_scale.py: one row per scale with its success interval; the table's ratio is to the
    zero-noise row, written as ``-`` without one."""
    bench = load("vla_noise_scale")
    out = tmp_path / "noise.json"
    bench.main([str(tiny_run), "--scales", "0", "1", "--episodes", "2", "--num-envs", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["command"].startswith("python benchmarks/vla_noise_scale.py")
    assert [r["noise_scale"] for r in result["rows"]] == [0.0, 1.0]
    assert all(r["episodes"] == 2 and 0 <= r["success_rate"] <= 1 for r in result["rows"])
    rows = [{"noise_scale": 0.0, "success_rate": 0.8, "success_ci95": [0.7, 0.9], "return_mean": 60.0},
            {"noise_scale": 1.0, "success_rate": 0.4, "success_ci95": [0.3, 0.5], "return_mean": 50.0}]
    assert bench.table(rows).splitlines()[-1] == "| N(0, 1^2 I) | 40% | 30%-50% | 50.0 | 0.50x |"
    assert bench.table(rows[1:]).splitlines()[-1].endswith("| 50.0 | - |")


def test_robot_rl_eval_of_a_vla_run_reports_both_instructions_and_writes_a_video(tiny_run: Path, tmp_path: Path,
                                                                                 capsys) -> None:
    from robot_rl.cli import main

    video = tmp_path / "eval.mp4"
    assert main(["eval", str(tiny_run), "--episodes", "2", "--num-envs", "2", "--wrong-instruction",
                 "--video", str(video)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == summary["wrong_instruction"]["episodes"] == 2
    assert "success_by_target" in summary["wrong_instruction"] and video.stat().st_size > 0


def test_the_diagnosis_measures_the_fit_on_demonstrations_and_the_closed_loop(tiny_run: Path, tmp_path: Path) -> None:
    """benchmarks/vla_diagnose.py on a run: first / fifth / last-frame chunk fit and closed-loop distances."""
    diagnose = load("vla_diagnose")
    out = tmp_path / "diagnosis.json"
    diagnose.main([str(tiny_run), "--episodes", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["command"].startswith("python benchmarks/vla_diagnose.py")
    result = result["rows"]
    assert set(result["fit"]) == {"first", "fifth", "last"}
    for row in result["fit"].values():
        assert row["frames"] == 2 and -1.0 <= row["motion_cosine"] <= 1.0 and row["sampled_motion"] >= 0
    loop = result["closed_loop"]
    assert loop["episodes"] == 2 and 0 <= loop["within_2cm_at_end"] <= 1
    assert loop["median_closest_to_named_cm"] <= loop["median_start_to_named_cm"]
    assert loop["median_end_to_nearest_any_cm"] <= loop["median_end_to_named_cm"]


def test_the_expert_probe_trains_a_regressor_and_a_flow_on_the_runs_keypoints_and_plays_them(dataset: Path,
                                                                                                tmp_path: Path) -> None:
    """benchmarks/vla_expert_probe.py on a film run: the probe inputs are the state and one keypoint per camera
    (the run's, or the target's true image position), its targets the run's standardised residual chunks; each arm
    is played in fresh episodes and scored."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    probe = load("vla_expert_probe")
    run = tmp_path / "run"
    runner = Runner(config(dataset, "agent.updates=10", "agent.image_encoder=efficientnet_lite0_film",
                           "agent.image_keypoints=1", "agent.target_keypoint=1.0"), run)
    runner.learn(evaluate_and_export=False)
    agent = runner.agent
    batches = agent.load_batches()
    own, true = (probe.frame_features(agent, batches, inputs) for inputs in ("own", "true"))
    assert own["x"].shape == (len(batches), 6 + 2) and own["y"].shape == (len(batches), 4 * 6)
    assert torch.equal(own["y"], true["y"]) and torch.equal(own["x"][:, :6], true["x"][:, :6])
    assert torch.equal(true["x"][:, 6:], batches.target[:, :, 0].flatten(1))
    assert not own["keep"].all() and own["keep"].any()  # the chunks past an episode's end are masked
    worded = probe.frame_features(agent, batches, "own_text")  # plus the instruction summary the condition reads
    text = agent.model.instruction_summary(batches.tokens[batches.task_index], batches.token_mask[batches.task_index])
    assert torch.equal(worded["x"][:, :8], own["x"]) and torch.allclose(worded["x"][:, 8:], text)
    model, frames = agent.model, batches.batch(torch.tensor([2, 30]))  # the chunks in the VLA's own training units
    residual = (frames["action"] - model.anchor(frames["state"]) - model.action_mean) / model.action_std
    assert torch.allclose(own["y"][[2, 30]], residual.flatten(1))
    out = tmp_path / "probe.json"
    probe.main([str(run), "--inputs", "own", "true", "--objective", "regression", "flow", "--steps", "5",
                "--episodes", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["command"].startswith("python benchmarks/vla_expert_probe.py")
    rows = result["rows"]["rows"]
    assert [(r["inputs"], r["objective"]) for r in rows] == [("own", "regression"), ("own", "flow"),
                                                             ("true", "regression"), ("true", "flow")]
    assert all(r["episodes"] == 2 and 0 <= r["success_rate"] <= 1 for r in rows)


def test_the_reach_lang_recipe_composes_and_trains(dataset: Path, tmp_path: Path) -> None:
    """``recipe=vla_reach_lang`` (docs/vla.md): the task, cameras and the keypoint settings it documents, and it
    trains under the normal runner (the tiny dataset has only the front camera at 32x32: overridden here)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    cfg = compose(["recipe=vla_reach_lang", f"agent.dataset={dataset}", "logger=none"])
    assert cfg.task.name == "so101_reach_lang" and list(cfg.task.env["cameras"]) == ["front", "top"]
    agent = cfg.agent
    assert (list(agent.cameras), agent.image_encoder, agent.film_stride, agent.film_kernel, agent.target_keypoint,
            agent.global_condition, agent.condition_text, agent.action_expert, agent.expert_updates,
            agent.motion_boost, agent.state_noise) == (
        ["front", "top"], "efficientnet_lite0_film", 2, 3, 30.0, True, False, "mlp", 0, 4.0, 0.0)
    run = tmp_path / "run"
    tiny = ["task.env.cameras=[front]", "agent.cameras=[front]", "task.env.image_size=32", "+task.env.episode_s=1.0",
            "task.num_envs=4", "agent.updates=20", "agent.log_interval=10", "agent.warmup_updates=0",
            "eval_episodes=0", "export_formats=[]", "sim.num_threads=1"]
    runner = Runner(compose(["recipe=vla_reach_lang", f"agent.dataset={dataset}", "logger=none", *tiny]), run)
    runner.learn(evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20]
    assert all(torch.isfinite(torch.tensor(r["loss/flow"])) for r in rows)


def test_the_pick_lang_recipe_aims_the_keypoint_at_the_named_cube_and_trains(tmp_path: Path) -> None:
    """``recipe=vla_pick_lang``: front + wrist, the keypoint loss on ``sim.named_position`` (a pick recording keeps
    the named cube's position per frame), and it trains on a tiny pick recording: the keypoint loss is logged and
    finite (the wrist camera moves: only ``front``'s keypoint is supervised)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    root = tmp_path / "pick_lang"
    record("so101_pick_lang", expert_policy, root, 3, None, num_envs=3, seed=0,
           overrides={"episode_s": 1.0, "cameras": ["front", "wrist"], "image_size": 32})
    cfg = compose(["recipe=vla_pick_lang", f"agent.dataset={root}", "logger=none"])
    assert cfg.task.name == "so101_pick_lang" and list(cfg.agent.cameras) == ["front", "wrist"]
    assert (cfg.agent.target_key, cfg.agent.target_keypoint) == ("sim.named_position", 30.0)
    run = tmp_path / "run"
    tiny = ["task.env.image_size=32", "+task.env.episode_s=1.0", "task.num_envs=3", "agent.updates=20",
            "agent.log_interval=10", "agent.warmup_updates=0", "eval_episodes=0", "export_formats=[]",
            "sim.num_threads=1"]
    Runner(compose(["recipe=vla_pick_lang", f"agent.dataset={root}", "logger=none", *tiny]), run).learn(
        evaluate_and_export=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20]
    assert all(torch.isfinite(torch.tensor([r["loss/flow"], r["loss/keypoint_target"]])).all() for r in rows)


def test_agent_width_overrides_the_size_preset(dataset: Path, tmp_path: Path) -> None:
    assert Runner(config(dataset), tmp_path / "preset").agent.model_config.width == 64
    runner = Runner(config(dataset, "agent.width=128"), tmp_path / "wide")
    assert runner.agent.model_config.width == 128 and runner.agent.model.state_proj.out_features == 128
    with pytest.raises(InputError, match="width"):
        config(dataset, "agent.width=100")
