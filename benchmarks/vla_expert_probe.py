"""Is a trained VLA's action expert what limits it? A small regressor on the VLA's own keypoints, in closed loop.

For an ``agent=vla`` run with ``image_encoder=efficientnet_lite0_film`` on a reaching task (``so101_reach_lang``),
the run's frozen model gives every dataset frame its keypoints (the first keypoint of each camera, ``[C, 2]``);
an MLP (two hidden layers) then regresses the frame's chunk relative to the run's anchor, in the run's
standardised action units, from the standardised joint positions and those keypoints (``--inputs own``), or from
the named target's true image positions (``--inputs true``: the ceiling with perfect keypoints). The MLP is played
in fresh episodes exactly as evaluation plays the VLA (cameras rendered at each query, the run's keypoint head on
them, ``execute_len`` actions open loop) and scored by the env's success rule, beside the VLA's own success on the
same episodes where ``benchmarks/vla_sft.py`` made the run (its rows ``docs/results/vla/<run name>.json``).

    python benchmarks/vla_expert_probe.py outputs/bench_vla_sft/so101_reach_lang-recipe_dart02_r2 --inputs own true

A regressor that succeeds far more often than the VLA on the same keypoints says the VLA's expert reads them
badly; one that does not says the keypoints (or the demonstrations) are the limit. Writes the rows, with the command
and commit, to ``docs/results/vla/expert_probe-<run name>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from _results import RESULTS, write_rows
from torch import nn

from robot_rl.models.chunked_actor import ChunkExecutor
from robot_rl.models.vla import flow
from robot_rl.models.vla.model import MLPExpert, time_embedding
from robot_rl.train.evaluation import EnvPlayer, evaluate
from robot_rl.train.run_loading import open_run

TIME_DIM = 32
"""Width of the flow probe's time embedding."""
WIDTH = 64
"""``--film``: width of the condition and of the time embedding (``VLAConfig.cpu``'s)."""


def frame_features(agent, batches, inputs: str, chunk: int = 512) -> dict[str, torch.Tensor]:
    """Every dataset frame's probe input ``x [N, S + 2C]``, target ``y [N, H*A]`` (standardised residual chunk)
    and loss mask ``keep [N, H*A]`` (False on steps past the episode's end)."""
    model = agent.model.eval()
    xs, ys, keeps = [], [], []
    for start in range(0, len(batches), chunk):
        batch = batches.batch(torch.arange(start, min(start + chunk, len(batches))))
        with torch.no_grad():
            points = (model.keypoints(batch)[:, :, 0] if inputs != "true" else batch["target"][:, :, 0]).flatten(1)
            text = model.instruction_summary(batch["tokens"], batch["token_mask"]) if inputs == "own_text" else None
        state = (batch["state"] - model.state_mean) / model.state_std
        residual = (batch["action"] - model.anchor(batch["state"]) - model.action_mean) / model.action_std
        xs.append(torch.cat([state, points.float(), *([text] if text is not None else [])], dim=1))
        ys.append(residual.flatten(1))
        keeps.append((~batch["action_is_pad"]).unsqueeze(-1).expand_as(residual).flatten(1))
    return {"x": torch.cat(xs), "y": torch.cat(ys), "keep": torch.cat(keeps)}


class Probe(nn.Module):
    """An MLP from the probe input ``x [B, X]`` to a standardised residual chunk ``[B, H*A]``: a regressor, or a
    flow-matching velocity field ``v(x_t, t | x)`` (LeRobot's convention, :mod:`robot_rl.models.vla.flow`) sampled
    from zero noise in ``flow_steps`` Euler steps, as the VLA's expert is."""

    def __init__(self, inputs: int, outputs: int, hidden: int, objective: str, flow_draws: int = 1,
                 flow_steps: int = 10, film: bool = False) -> None:
        super().__init__()
        self.objective, self.draws, self.flow_steps, self.outputs = objective, flow_draws, flow_steps, outputs
        self.film = film
        if film:  # the VLA's own form: a condition MLP and MLPExpert's FiLM blocks (VLAConfig.cpu's sizes)
            self.condition = nn.Sequential(nn.Linear(inputs, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
            self.net = MLPExpert(outputs, 2 * WIDTH, hidden)
            return
        extra = outputs + TIME_DIM if objective == "flow" else 0
        self.net = nn.Sequential(nn.Linear(inputs + extra, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, outputs))

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.film:
            return self.net(x_t, torch.cat([time_embedding(t, WIDTH), self.condition(x)], dim=1))
        return self.net(torch.cat([x, x_t, time_embedding(t, TIME_DIM)], dim=1))

    def loss(self, x: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Masked mean squared error of the regression, or of the flow's velocity at ``flow_draws`` random (noise,
        time) pairs per frame."""
        if self.objective == "regression":
            error = self.net(x) - y
        else:
            x, y, keep = (v.repeat(self.draws, 1) for v in (x, y, keep))
            noise, t = torch.randn_like(y), flow.sample_time(len(y))
            error = self.velocity(flow.interpolate(y, noise, t), t, x) - flow.target_velocity(y, noise)
        return ((error ** 2) * keep).sum() / keep.sum()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.objective == "regression":
            return self.net(x)
        noise = torch.zeros(len(x), self.outputs)
        return flow.euler_sample(lambda x_t, t: self.velocity(x_t, t, x), noise, self.flow_steps)


def train_probe(data: dict[str, torch.Tensor], objective: str, steps: int, hidden: int, weights: torch.Tensor | None,
                flow_draws: int, seed: int, film: bool = False, batch: int = 256) -> tuple[Probe, float]:
    """A :class:`Probe` fitted to ``data`` (Adam 1e-3 with a cosine decay, ``batch`` frames per step drawn uniformly
    or in proportion to ``weights [N]``); its last loss."""
    torch.manual_seed(seed)
    x, y, keep = data["x"], data["y"], data["keep"].float()
    probe = Probe(x.shape[1], y.shape[1], hidden, objective, flow_draws, film=film)
    opt = torch.optim.Adam(probe.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        i = (torch.randint(0, len(x), (batch,)) if weights is None
             else torch.multinomial(weights, batch, replacement=True))
        loss = probe.loss(x[i], y[i], keep[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return probe.eval(), loss.item()


class ProbePlayer(EnvPlayer):
    """The regressor played like a VLA (:class:`robot_rl.train.vla_eval.VLAPlayer`): at each query the cameras are
    rendered, the run's keypoint head reads them with the instruction (``own``), or the env projects the named
    target (``true``), and the chunk is played ``execute_len`` steps open loop."""

    def __init__(self, agent, net: nn.Module, inputs: str) -> None:
        self.agent, self.model, self.net, self.inputs = agent, agent.model.eval(), net, inputs
        self.executor: ChunkExecutor | None = None

    def act(self, env, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        model, cams = self.model, self.model.config.cameras
        state = env.joint_positions()
        if self.executor is None:
            self.executor = ChunkExecutor(env.num_envs, model.config.chunk_len, env.action_dim, "open_loop",
                                          self.agent.cfg.execute_len)

        @torch.no_grad()
        def chunks(rows: torch.Tensor) -> torch.Tensor:
            s = state[rows]
            texts = env.instructions()
            tokens, mask = self.agent.tokenizer.encode([texts[i] for i in rows.tolist()], model.config.max_text_len)
            if self.inputs == "true":
                points = torch.stack([env.image_position(env.target[rows], c) for c in cams], dim=1).flatten(1)
            else:
                images = env.camera_images(rows.numpy())
                obs = {"images": {c: images[c] for c in cams}, "tokens": tokens, "token_mask": mask, "state": s}
                points = model.keypoints(obs)[:, :, 0].flatten(1)
            text = [model.instruction_summary(tokens, mask)] if self.inputs == "own_text" else []
            x = torch.cat([(s - model.state_mean) / model.state_std, points.float(), *text], dim=1)
            residual = self.net(x).view(len(rows), model.config.chunk_len, -1) * model.action_std + model.action_mean
            return (residual + model.anchor(s)).clamp(-1.0, 1.0)

        return self.executor.act(torch.arange(env.num_envs), chunks)

    def reset(self, done: torch.Tensor) -> None:
        if self.executor is not None:
            self.executor.reset(done)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="an agent=vla run (image_encoder=efficientnet_lite0_film, target_keypoint "
                                          "> 0) on a reaching language task")
    p.add_argument("--inputs", nargs="+", choices=("own", "true", "own_text"), default=["own", "true"],
                   help="own: the run's keypoints; true: the named target's true image positions; own_text: the "
                        "run's keypoints and its instruction summary (the mean token embedding, as the VLA's global "
                        "condition reads it)")
    p.add_argument("--objective", nargs="+", choices=("regression", "flow"), default=["regression"],
                   help="regression: an MLP regressor; flow: an MLP flow-matching velocity field (the VLA's loss)")
    p.add_argument("--steps", type=int, default=10000, help="probe gradient steps")
    p.add_argument("--batch", type=int, default=256, help="frames per step")
    p.add_argument("--flow-draws", type=int, default=1, help="flow: (noise, time) draws per frame and step")
    p.add_argument("--film", action="store_true",
                   help="flow: the VLA's action_expert=mlp form (a condition MLP and MLPExpert's FiLM blocks) instead "
                        "of one MLP over the concatenated inputs")
    p.add_argument("--motion-boost", type=float, default=0.0,
                   help="> 0: draw frames as agent.motion_boost does (the VLA recipe's 4); 0: uniformly")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=1000, help="first evaluation episode seed")
    p.add_argument("--out", type=Path, default=None, help="default: docs/results/vla/expert_probe-<run name>.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    runner = open_run(args.run, num_envs=args.episodes)
    agent = runner.agent
    if not agent.model.instructed_images or not agent.cfg.target_keypoint:
        sys.exit(f"{args.run}: the probe needs a run with image_encoder=efficientnet_lite0_film and "
                 "target_keypoint > 0 (keypoints and the recorded target positions)")
    batches = agent.load_batches()
    sft_rows = RESULTS / "vla" / f"{args.run.name}.json"  # benchmarks/vla_sft.py's rows of this run, if it made it
    vla = json.loads(sft_rows.read_text())["rows"][0]["named"] if sft_rows.exists() else None
    weights = None
    if args.motion_boost > 0:
        weights = batches.motion_weights(agent.model.anchor_weight, agent.model.anchor_bias, args.motion_boost)
    features = {inputs: frame_features(agent, batches, inputs) for inputs in args.inputs}
    rows = []
    for inputs, objective in [(i, o) for i in args.inputs for o in args.objective]:
        t0 = time.perf_counter()
        net, loss = train_probe(features[inputs], objective, args.steps, args.hidden, weights, args.flow_draws, seed=0,
                                film=args.film, batch=args.batch)
        train_s = time.perf_counter() - t0
        env = runner.env_factory(args.episodes, args.seed)
        player = ProbePlayer(agent, net, inputs)
        summary = evaluate(player, env, args.episodes, args.seed, on_done=player.reset).summary()
        env.close()
        rows.append({"inputs": inputs, "objective": objective, "flow_draws": args.flow_draws, "film": args.film,
                     "motion_boost": args.motion_boost, "steps": args.steps, "batch": args.batch,
                     "hidden": args.hidden, "final_loss": round(loss, 4),
                     "train_s": round(train_s, 1), "episodes": args.episodes, "seed": args.seed,
                     "success_rate": summary["success_rate"], "success_ci95": summary["success_ci95"]})
        print(json.dumps(rows[-1]), flush=True)
    result = {"run": str(args.run), "vla_success": vla and {k: vla[k] for k in ("success_rate", "success_ci95")},
              "rows": rows}
    out = args.out or RESULTS / "vla" / f"expert_probe-{args.run.name}.json"
    write_rows(out, result, ["benchmarks/vla_expert_probe.py", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
