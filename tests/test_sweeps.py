"""Sweeps through Hydra's launcher plugins (the [cluster] extra): configs/hydra/launcher/*.yaml.

A real 2-run ``submitit_local`` sweep of a tiny so101_reach training run (the code path of
``hydra/launcher=slurm`` minus sbatch), and the Slurm config turned into the sbatch script submitit
would submit (no scheduler here: the script is built, not run).
"""

import os

import pytest

from robot_rl.config import CONFIG_DIR
from tests.test_train_cli import TINY, cli

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the [cluster] extra")


def test_submitit_local_sweep_runs_each_seed_as_a_job(tmp_path):
    tiny = [a for a in TINY if not a.startswith("eval_episodes")]
    out = cli(["train", "-m", "hydra/launcher=local", "seed=3,4", *tiny, "eval_episodes=0", "export_formats=[]",
               "logger=none"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Submitit 'local' sweep output dir" in out.stdout + out.stderr
    sweep = next((tmp_path / "outputs").glob("*/*"))
    configs = sorted(sweep.glob("*/config.yaml"))
    assert [p.parent.name for p in configs] == ["0", "1"]
    assert ["seed: 3" in configs[0].read_text(), "seed: 4" in configs[1].read_text()] == [True, True]
    for run in ("0", "1"):
        steps = (sweep / run / "metrics.jsonl").read_text().splitlines()
        assert len(steps) == 2 and (sweep / run / "checkpoints" / "step_000000000128").is_dir()
    # one submitit job (own process, own log) per run
    logs = [p for p in sweep.glob(".submitit/*/*_log.err") if "run directory:" in p.read_text()]
    assert len(logs) == 2


def test_slurm_launcher_config_makes_an_sbatch_script(tmp_path, monkeypatch):
    """Our slurm.yaml through the calls Hydra's SlurmLauncher.launch makes, up to the sbatch script.

    submitit refuses to build a Slurm executor where ``srun`` is not on PATH: a stand-in ``srun`` (never
    run) is put there."""
    import submitit
    from hydra import compose, initialize_config_dir
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                                       "hydra.launcher.gpus_per_node=1"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher)
    assert params.pop("_target_").endswith("SlurmLauncher")
    params.pop("submitit_folder")
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}:{os.environ['PATH']}")
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path / "%j",
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    params["name"] = "train"  # ${hydra.job.name}, set when Hydra runs a job
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --time=240", "#SBATCH --mem=16GB", "#SBATCH --job-name=train"):
        assert line in script, (line, script)
