"""Fuzz cases of kind ``config``: nonsense Hydra values for ``robot-rl train``, each refused before training.

Every case runs ``train <TRAIN_TINY> hydra.run.dir=<case>/run <bad override>`` and expects exit 2 with the
offending key in the message (``robot_rl.config.checks``, the schemas' ``__post_init__``, the pairing check).
"""

from __future__ import annotations

from pathlib import Path

from fuzz_harness import TRAIN_TINY, FuzzCase, GoodInputs

TRAIN_TINY_NO_AGENT = [a for a in TRAIN_TINY if not a.startswith("agent.")]
"""TRAIN_TINY without its PPO keys, for cases that pick another agent."""

BAD_VALUES: list[tuple[str, tuple[str, ...]]] = [
    ("agent.learning_rate=nan", ("agent.learning_rate", "finite")),
    ("agent.learning_rate=inf", ("agent.learning_rate", "finite")),
    ("agent.learning_rate=-1e-3", ("agent.learning_rate", "> 0")),
    ("agent.learning_rate=0", ("agent.learning_rate",)),
    ("agent.learning_rate=fast", ("agent.learning_rate",)),
    ("agent.value_loss_coef=nan", ("agent.value_loss_coef",)),
    ("agent.entropy_coef=-1", ("agent.entropy_coef", ">= 0")),
    ("agent.gamma=1.5", ("agent.gamma", "[0, 1]")),
    ("agent.lam=-0.1", ("agent.lam",)),
    ("agent.clip_param=-1", ("agent.clip_param",)),
    ("agent.desired_kl=0", ("agent.desired_kl",)),
    ("agent.max_grad_norm=inf", ("agent.max_grad_norm",)),
    ("agent.init_noise_std=0", ("agent.init_noise_std",)),
    ("agent.critic_learning_rate=-1", ("agent.critic_learning_rate",)),
    ("agent.num_mini_batches=0", ("agent.num_mini_batches",)),
    ("agent.num_learning_epochs=-2", ("agent.num_learning_epochs",)),
    ("agent.actor_hidden_dims=[0]", ("agent.actor_hidden_dims",)),
    ("agent.schedule=cosine", ("agent.schedule", "adaptive")),
    ("agent.activation=swishy", ("agent.activation",)),
    ("agent.group_weights=[nan]", ("agent.group_weights",)),
    ("agent.num_steps_per_env=1000", ("task.total_steps", "first update")),
    ("critic.hidden_dims=[0]", ("critic.hidden_dims",)),
    ("critic.activation=nope", ("critic.activation",)),
    ("task.num_envs=0", ("task.num_envs",)),
    ("task.num_envs=many", ("task.num_envs",)),
    ("task.total_steps=-100", ("task.total_steps",)),
    ("task.name=no_such_task", ("no_such_task",)),
    ("+task.env.episode_s=-1", ("task.env.episode_s",)),
    ("+task.env.episode_s=nan", ("task.env.episode_s", "finite")),
    ("+task.env.physics_dt=0", ("task.env.physics_dt",)),
    ("+task.env.policy_hz=0", ("task.env.policy_hz",)),
    ("+task.env.control={physics_dt:0}", ("task.env.control.physics_dt",)),
    ("+task.env.no_such_setting=1", ("no_such_setting",)),
    ("+task.env.rewards={distanse:1.0}", ("no reward term 'distanse'", "distance")),
    ("+task.env.rewards={distance:nan}", ("task.env.rewards.distance", "finite")),
    ("+task.env.rewards={reach_fine:{params:{sigma:0.1}}}", ("no parameter 'sigma'", "std")),
    ("sim.num_threads=-3", ("sim.num_threads",)),
    ("sim.device=gpu0", ("sim.device",)),
    ("checkpoint_interval=0", ("checkpoint_interval", ">= 1")),
    ("checkpoint_interval=-1", ("checkpoint_interval",)),
    ("eval_episodes=-5", ("eval_episodes",)),
    ("seed=-1", ("seed",)),
    (f"seed={2**70}", ("seed",)),
    ("export_formats=[tflite]", ("export_formats", "tflite")),
    ("logger.backends=[no_such_logger]", ("logger.backends",)),
    ("agent.learning_rat=1e-3", ("agent.learning_rat",)),
]

BAD_PAIRS: list[tuple[str, str, tuple[str, ...]]] = [
    ("sac", "world_model", ("critic", "world_model", "agent=sac", "ensemble")),
    ("td3", "world_model", ("critic", "world_model", "agent=td3")),
    ("ppo", "ensemble", ("critic", "agent=ppo", "mlp")),
    ("tqc", "c51", ("critic", "agent=tqc", "quantile")),
    ("tdmpc", "mlp", ("critic", "agent=tdmpc", "world_model")),
]

OTHER_AGENT: list[tuple[str, tuple[str, ...]]] = [
    ("agent=sac agent.learning_starts=100000", ("task.total_steps", "first update")),
    ("agent=sac agent.tau=1.5", ("agent.tau",)),
    ("agent=sac agent.actor_lr=nan", ("agent.actor_lr",)),
    ("agent=td3 agent.batch_size=0", ("agent.batch_size",)),
    ("agent=sac critic.num_members=0", ("critic.num_members",)),
]


def _value_case(override: str, expect: tuple[str, ...]) -> FuzzCase:
    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        return ["train", *TRAIN_TINY, f"hydra.run.dir={case_dir / 'run'}", override]

    return FuzzCase(f"config/{override}", "config", make, expect)


def _pair_case(agent: str, critic: str, expect: tuple[str, ...]) -> FuzzCase:
    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        return ["train", *TRAIN_TINY_NO_AGENT, f"hydra.run.dir={case_dir / 'run'}", f"agent={agent}",
                f"critic={critic}"]

    return FuzzCase(f"config/agent={agent} critic={critic}", "config", make, expect)


def _other_agent_case(overrides: str, expect: tuple[str, ...]) -> FuzzCase:
    def make(case_dir: Path, good: GoodInputs) -> list[str]:
        return ["train", *TRAIN_TINY_NO_AGENT, f"hydra.run.dir={case_dir / 'run'}", *overrides.split()]

    return FuzzCase(f"config/{overrides}", "config", make, expect)


def cases() -> list[FuzzCase]:
    """Every config case: one bad PPO value each, incompatible agent/critic pairs, off-policy values."""
    return ([_value_case(o, e) for o, e in BAD_VALUES] + [_pair_case(a, c, e) for a, c, e in BAD_PAIRS]
            + [_other_agent_case(o, e) for o, e in OTHER_AGENT])
