"""The VLA family (robot_rl.models.vla): tokenizer, flow-matching math, model, dataset batches, overfitting."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, trainers
from torch import nn

from robot_rl.data.vla_batches import VLABatches, random_shift
from robot_rl.demos.recorder import expert_policy, record
from robot_rl.errors import InputError
from robot_rl.models.vla import VLA, InstructionTokenizer, VLAConfig, flow
from robot_rl.models.vla.encoders import ConvImageEncoder, spatial_softmax
from robot_rl.models.vla.model import keypoint_loss
from sim.tasks.so101_pick_lang import INSTRUCTIONS as PICK
from sim.tasks.so101_reach_lang import INSTRUCTIONS as REACH

TEXTS = list(REACH.table()) + list(PICK.table())


@pytest.fixture(scope="module")
def tokenizer() -> InstructionTokenizer:
    return InstructionTokenizer.train(TEXTS, vocab_size=192)


# ---------------------------------------------------------------- tokenizer
def test_tokenizer_round_trips_every_instruction_and_unknown_words(tokenizer, tmp_path: Path) -> None:
    ids, mask = tokenizer.encode(TEXTS, max_len=24)
    assert ids.shape == mask.shape == (len(TEXTS), 24) and mask.any(dim=1).all()
    assert [tokenizer.decode(row) for row in ids] == TEXTS
    assert (ids[~mask] == 0).all() and (ids[mask] != tokenizer.unk_id).all()
    assert mask.sum(1).max() < 12  # merges learned: the instructions are shorter than their characters
    unseen = "Fetch the PURPLE zebra, 42 times!"
    ids, _ = tokenizer.encode([unseen], max_len=64)
    assert tokenizer.decode(ids[0]) == unseen.lower() and tokenizer.unk_id not in ids[0].tolist()
    ids, _ = tokenizer.encode(["reach the rød target"], max_len=16)
    assert tokenizer.unk_id in ids[0].tolist()  # a character outside the alphabet
    ids, mask = tokenizer.encode(["move the gripper to the yellow ball"], max_len=3)
    assert mask.all() and ids.shape == (1, 3)  # cut at max_len
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    assert path.read_text().lstrip().startswith("{")
    loaded = InstructionTokenizer.load(path)
    assert torch.equal(loaded.encode(TEXTS, 24)[0], tokenizer.encode(TEXTS, 24)[0])
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(InputError, match="not a tokenizer JSON"):
        InstructionTokenizer.load(tmp_path / "bad.json")
    other = Tokenizer(models.BPE())
    other.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=60, show_progress=False))
    (tmp_path / "other.json").write_text(other.to_str())
    with pytest.raises(InputError, match=r"without \[PAD\]"):
        InstructionTokenizer.load(tmp_path / "other.json")
    with pytest.raises(InputError, match="not found"):
        InstructionTokenizer.load(tmp_path / "missing.json")


# ---------------------------------------------------------------- flow math
def test_flow_interpolation_velocity_and_loss_hand_values() -> None:
    action, noise = torch.tensor([[2.0, 0.0]]), torch.tensor([[-1.0, 4.0]])
    x = flow.interpolate(action, noise, torch.tensor([0.25]))
    assert torch.allclose(x, torch.tensor([[1.25, 1.0]]))  # 0.25 * noise + 0.75 * action
    assert torch.equal(flow.interpolate(action, noise, torch.tensor([1.0])), noise)
    assert torch.equal(flow.interpolate(action, noise, torch.tensor([0.0])), action)
    assert torch.equal(flow.target_velocity(action, noise), torch.tensor([[-3.0, 4.0]]))
    # chunks [B=1, H=2, A=1]: target velocity (noise - action) = [1, 2]; prediction [0, 0]
    a, n, pred = torch.zeros(1, 2, 1), torch.tensor([[[1.0], [2.0]]]), torch.zeros(1, 2, 1)
    assert flow.flow_loss(pred, a, n).item() == pytest.approx(2.5)  # (1 + 4) / 2
    assert flow.flow_loss(pred, a, n, torch.tensor([[True, False]])).item() == pytest.approx(1.0)


def test_flow_time_is_lerobots_scaled_beta() -> None:
    t = flow.sample_time(5, torch.Generator().manual_seed(3))
    u = torch.rand(5, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(t, 0.999 * u.pow(1 / 1.5) + 0.001)
    many = flow.sample_time(200_000, torch.Generator().manual_seed(0))
    assert many.min() >= 0.001 and many.max() <= 1.0
    assert many.mean().item() == pytest.approx(0.999 * 0.6 + 0.001, abs=3e-3)  # Beta(1.5, 1) mean 0.6
    assert (many < 0.5).float().mean().item() == pytest.approx(((0.5 - 0.001) / 0.999) ** 1.5, abs=3e-3)


def test_euler_sampler_hand_cases() -> None:
    times = []

    def constant(x, t):
        times.append(t[0].item())
        return torch.full_like(x, 2.0)

    noise = torch.tensor([[1.0], [3.0]])
    assert torch.allclose(flow.euler_sample(constant, noise, 4), noise - 2.0)
    assert times == [1.0, 0.75, 0.5, 0.25]
    # the straight path to a fixed action: v = (x - a) / t is exact under Euler at any step count
    a = torch.tensor([[0.5], [-2.0]])
    assert torch.allclose(flow.euler_sample(lambda x, t: (x - a) / t[:, None], noise, 3), a, atol=1e-6)
    with pytest.raises(ValueError, match="steps"):
        flow.euler_sample(constant, noise, 0)


MU, SIGMA = 2.0, 0.5


def gaussian_velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """E[noise - a | x_t] for a ~ N(MU, SIGMA^2), noise ~ N(0, 1): the exact flow of this target."""
    t = t[:, None]
    var = t**2 + (1 - t) ** 2 * SIGMA**2
    return -MU + (t - (1 - t) * SIGMA**2) / var * (x - (1 - t) * MU)


def test_a_one_dimensional_gaussian_target_is_recovered() -> None:
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(20_000, 1, generator=g)
    exact = flow.euler_sample(gaussian_velocity, noise, 100)
    assert exact.mean().item() == pytest.approx(MU, abs=0.02) and exact.std().item() == pytest.approx(SIGMA, abs=0.02)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 1500)
    for _ in range(1500):
        a = MU + SIGMA * torch.randn(256, 1, generator=g)
        n, t = torch.randn(256, 1, generator=g), flow.sample_time(256, g)
        loss = flow.flow_loss(net(torch.cat([flow.interpolate(a, n, t), t[:, None]], 1)), a, n)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    with torch.no_grad():
        learned = flow.euler_sample(lambda x, t: net(torch.cat([x, t[:, None]], 1)), noise, 50)
    # measured 1.992 and 0.487; tolerance 0.05 on both (10% of SIGMA; the noise's mean is 0, its std 1)
    assert learned.mean().item() == pytest.approx(MU, abs=0.05)
    assert learned.std().item() == pytest.approx(SIGMA, abs=0.05)


# ---------------------------------------------------------------- model
def observation(batch: int, config: VLAConfig, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(config.max_text_len) < 5
    return {
        "images": {cam: torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8)
                   for cam in config.cameras},
        "tokens": torch.randint(2, config.vocab_size, (batch, config.max_text_len), generator=g) * mask,
        "token_mask": mask.expand(batch, -1),
        "state": torch.randn(batch, config.state_dim, generator=g),
    }


def test_model_shapes_determinism_and_padding() -> None:
    torch.manual_seed(0)
    config = VLAConfig.cpu(state_dim=5, action_dim=3, vocab_size=50, cameras=("front", "wrist"), chunk_len=6,
                           max_text_len=8, width=32, conv_channels=(8, 16), image_grid=2, num_steps=4)
    model = VLA(config).eval()
    obs = observation(3, config)
    context = model.encode(obs)
    assert context.tokens.shape == (3, 2 * 4 + 8 + 1, 32) and context.pad.shape == (3, 17)
    assert context.pad[:, 8 + 5: 8 + 8].all() and not context.pad[:, :8 + 5].any() and not context.pad[:, -1].any()
    x_t = torch.randn(3, 6, 3)
    assert model.velocity(x_t, torch.full((3,), 0.5), context).shape == (3, 6, 3)
    noise = torch.randn(3, 6, 3)
    with torch.no_grad():
        first = model.sample(obs, noise)
        assert first.shape == (3, 6, 3) and torch.equal(first, model.sample(obs, noise))
        assert not torch.allclose(first, model.sample(obs, noise + 1.0))
        garbage = dict(obs, tokens=torch.where(obs["token_mask"], obs["tokens"], 7))  # padded ids changed
        assert torch.allclose(model.sample(garbage, noise), first, atol=1e-6)
        model.set_stats(torch.zeros(5), torch.ones(5), torch.tensor([1.0, 2.0, 3.0]), torch.full((3,), 2.0))
        assert torch.allclose(model.sample(obs, noise), 2.0 * first + torch.tensor([1.0, 2.0, 3.0]), atol=1e-5)
        weight, bias = torch.randn(3, 5), torch.randn(3)  # relative actions: the sample shifts by the anchor
        model.set_anchor(weight, bias)
        anchor = (obs["state"] @ weight.T + bias).unsqueeze(1)
        assert torch.allclose(model.sample(obs, noise), 2.0 * first + torch.tensor([1.0, 2.0, 3.0]) + anchor, atol=1e-5)
        action, t = torch.randn(3, 6, 3), torch.full((3,), 0.3)
        relative = model.loss(obs, action + anchor, noise, t)
        # the state token may read a noisy copy (agent.state_noise); the anchor keeps the true state
        seen = dict(obs, state_seen=obs["state"] + 0.5)
        assert not torch.allclose(model.encode(seen).tokens, model.encode(obs).tokens)
        assert torch.allclose(model.encode(dict(obs, state_seen=obs["state"])).tokens, model.encode(obs).tokens)
        shifted = model.sample(seen, noise) - anchor
        assert torch.allclose(model.sample(dict(seen, state=seen["state_seen"]), noise) - shifted,
                              model.anchor(seen["state_seen"]), atol=1e-5)
        model.set_anchor(torch.zeros(3, 5), torch.zeros(3))
        assert torch.allclose(relative, model.loss(obs, action, noise, t))
    with pytest.raises(ValueError, match="multiple of heads"):
        VLAConfig.cpu(5, 3, 50, width=30)
    with pytest.raises(ValueError, match="image_encoder"):
        VLAConfig.cpu(5, 3, 50, image_encoder="resnet")
    big = VLA(VLAConfig.gpu(6, 6, 256))
    assert VLA(VLAConfig.cpu(6, 6, 256)).num_parameters() < 500_000 < 5_000_000 < big.num_parameters()


def test_frozen_efficientnet_image_encoder() -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    config = VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0", width=32, image_grid=1, max_text_len=8)
    model = VLA(config)
    frozen = sum(p.numel() for p in model.image_encoder.backbone.parameters())
    assert frozen > 4_000_000 and model.num_parameters(trainable=False) - model.num_parameters() == frozen
    model.train()
    assert not model.image_encoder.backbone.training
    obs = observation(2, config)
    loss = model.loss(obs, torch.randn(2, 16, 3), torch.randn(2, 16, 3), torch.full((2,), 0.5))
    loss.backward()
    assert model.image_encoder.proj.weight.grad is not None
    assert all(p.grad is None for p in model.image_encoder.backbone.parameters())


# ---------------------------------------------------------------- recorded episodes
@pytest.fixture(scope="module")
def reach_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vla") / "reach_lang"
    summary = record("so101_reach_lang", expert_policy, root, 2, None, num_envs=2, seed=0,
                     overrides={"episode_s": 1.0, "cameras": ["front"], "image_size": 32})
    assert summary.episodes == 2 and summary.frames == 50
    return root


def test_spatial_softmax_hand_values_and_keypoint_tokens() -> None:
    logits = torch.full((1, 2, 2, 4), -1e9)
    logits[0, 0, 1, 3] = 0.0  # all mass on the pixel at row 1, column 3 of a 2 x 4 map
    logits[0, 1] = 0.0  # uniform: the centre
    points = spatial_softmax(logits)
    assert torch.allclose(points, torch.tensor([[[0.75, 0.5], [0.0, 0.0]]]), atol=1e-6)
    encoder = ConvImageEncoder(16, (8, 8), grid=2, keypoints=5)
    assert encoder(torch.zeros(3, 3, 32, 32, dtype=torch.uint8)).shape == (3, 4 + 5, 16)
    with pytest.raises(ValueError, match="image_keypoints"):
        VLAConfig.cpu(4, 2, 10, image_keypoints=4, image_encoder="efficientnet_lite0")


def test_random_shift_moves_each_image_by_its_own_offset_with_edges_replicated() -> None:
    images = torch.arange(2 * 4 * 4, dtype=torch.uint8).view(2, 1, 4, 4)
    g = torch.Generator().manual_seed(0)
    dx, dy = torch.randint(0, 3, (2,), generator=g), torch.randint(0, 3, (2,), generator=g)
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0))
    assert shifted.dtype == torch.uint8 and shifted.shape == images.shape
    for b in range(2):  # output pixel (r, c) = input pixel (r + dy - 1, c + dx - 1), clamped into the image
        rows = (torch.arange(4) + dy[b] - 1).clamp(0, 3)
        cols = (torch.arange(4) + dx[b] - 1).clamp(0, 3)
        assert torch.equal(shifted[b, 0], images[b, 0][rows][:, cols])
    first = torch.tensor([[5, 6, 7, 7], [9, 10, 11, 11], [13, 14, 15, 15], [13, 14, 15, 15]], dtype=torch.uint8)
    assert torch.equal(shifted[0, 0], first)  # hand value: seed 0 shifts image 0 by (+1, +1)
    assert torch.equal(random_shift(images, 0), images)


@pytest.mark.render
def test_dataset_batches_hold_chunks_images_and_instructions(reach_dataset: Path, tokenizer) -> None:
    batches = VLABatches(reach_dataset, tokenizer, chunk_len=8, max_text_len=12)
    assert batches.cameras == ("front",) and len(batches) == 50 and all(t in REACH.table() for t in batches.texts)
    batch = batches.batch(torch.tensor([0, 20, 24]))
    assert batch["images"]["front"].shape == (3, 3, 32, 32) and batch["images"]["front"].dtype == torch.uint8
    assert batch["state"].shape == (3, 6) and batch["action"].shape == (3, 8, 6)
    actions = batches.action
    assert torch.equal(batch["action"][0], actions[0:8])
    assert torch.equal(batch["action"][1, :5], actions[20:25]) and torch.equal(batch["action"][1, 5:],
                                                                               actions[24].expand(3, 6))
    assert batch["action_is_pad"][1].tolist() == [False] * 5 + [True] * 3
    assert batch["action_is_pad"][2].tolist() == [False] + [True] * 7  # last frame of episode 0
    assert [tokenizer.decode(row) for row in batch["tokens"][[0, 2]]] == [batches.texts[0]] * 2
    with pytest.raises(InputError, match="feature not in the dataset"):
        VLABatches(reach_dataset, tokenizer, 8, 12, cameras=("wrist",))
    # position control: the action is nearly the pose held, so the residual's spread is a small part of the action's
    *_, res_std, weight, bias = batches.anchored_normalization()
    held = batches.state @ weight.T + bias
    assert weight.shape == (6, 6) and (batches.action - held).abs().mean() < 0.2 * batches.action.std(0).mean()
    assert (res_std[:4] < 0.5 * batches.action.std(0)[:4]).all()  # the four joints that move
    # motion weights: a reach's first frames (its chunk moves away from the held pose) outweigh its last ones
    w = batches.motion_weights(weight, bias, boost=2.0)
    assert w.shape == (50,) and w.min() >= 1.0 and torch.isclose((w - 1).mean(), torch.tensor(2.0))
    assert w[:3].mean() > 2 * w[20:25].mean() and torch.equal(batches.motion_weights(weight, bias, 0.0), torch.ones(50))
    draws = [batches.sample(64, torch.Generator().manual_seed(1), w)["state"] for _ in range(2)]
    assert torch.equal(*draws)
    # image_lag: a state goes with the images of 0..L frames before, never before its episode's first frame
    assert batches.episode_start[[0, 24, 25, 49]].tolist() == [0, 0, 25, 25]
    frames = batches.images["front"]
    lagged = batches.batch(torch.tensor([25, 26, 3]), seen=torch.tensor([25, 25, 1]))
    assert torch.equal(lagged["images"]["front"], frames[[25, 25, 1]])
    assert torch.equal(lagged["state"], batches.state[[25, 26, 3]])
    plain = batches.sample(256, torch.Generator().manual_seed(3))
    late = batches.sample(256, torch.Generator().manual_seed(3), image_lag=3)
    assert torch.equal(plain["state"], late["state"])  # the same frames drawn; only their images move back
    index = [int((batches.state == row).all(1).nonzero()[0]) for row in late["state"]]
    moved = 0
    for row, i in enumerate(index):
        window = range(max(i - 3, int(batches.episode_start[i])), i + 1)
        assert any(torch.equal(late["images"]["front"][row], frames[j]) for j in window), (i, row)
        moved += not torch.equal(late["images"]["front"][row], frames[i])
    assert moved > 64  # ~3/4 of the draws lag by 1-3 frames (fewer at episode starts and where frames repeat)
    # frozen features cached once: batches then carry them (float16) in place of the images, shifts do not apply
    batches.cache_features(lambda images: images[:, :2, ::4, ::4].float() + 0.25, chunk=16)
    cached = batches.sample(4, torch.Generator().manual_seed(2), shift=4)
    assert "images" not in cached and cached["image_features"]["front"].dtype == torch.float16
    index = torch.tensor([3, 49])
    assert torch.equal(batches.batch(index)["image_features"]["front"],
                       (frames[index][:, :2, ::4, ::4].float() + 0.25).half())


@pytest.mark.render
@pytest.mark.slow
def test_the_model_overfits_two_recorded_episodes(reach_dataset: Path, tokenizer) -> None:
    torch.manual_seed(0)
    batches = VLABatches(reach_dataset, tokenizer, chunk_len=8, max_text_len=12)
    config = VLAConfig.cpu(6, 6, tokenizer.vocab_size, chunk_len=8, max_text_len=12, width=48,
                           conv_channels=(16, 32), image_grid=2)
    model = VLA(config)
    model.set_stats(*batches.normalization())
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(300):
        batch = batches.sample(32, g)
        noise, t = torch.randn(batch["action"].shape, generator=g), flow.sample_time(32, g)
        loss = model.loss(batch, batch["action"], noise, t, batch["action_is_pad"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:10]) / 10, sum(losses[-20:]) / 20
    assert first > 1.0 and last < 0.2, (first, last)  # measured 1.56 -> 0.07 (standardised velocity MSE)
    everything = batches.batch(torch.arange(len(batches)))
    with torch.no_grad():
        chunks = model.sample(everything, torch.zeros(len(batches), 8, 6))
    real = ~everything["action_is_pad"]
    err = ((chunks - everything["action"]) / model.action_std)[real]
    assert math.sqrt(err.pow(2).mean().item()) < 0.25  # measured 0.10 std, chunks sampled from zero noise


def test_instructed_keypoint_encoder_reads_the_instruction_and_caches_its_frozen_features() -> None:
    """``efficientnet_lite0_film``: K tokens per camera; the frozen layers get no gradient and stay in eval mode; the
    instruction moves the keypoints; precomputed features give the same context as the images they came from."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    torch.manual_seed(0)
    config = VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=3, width=32,
                           max_text_len=8, cameras=("front", "wrist"))
    model = VLA(config)
    encoder = model.image_encoder
    assert model.instructed_images and not VLA(VLAConfig.cpu(5, 3, 50)).instructed_images
    frozen = sum(p.numel() for p in encoder.backbone_parameters())
    assert model.num_parameters(trainable=False) - model.num_parameters() == frozen > 0
    model.train()
    assert not encoder.stem.training and not any(b.training for b in encoder.blocks) and encoder.logits.training
    obs = observation(2, config)
    features = model.image_features(obs["images"]["front"])
    assert features.shape == (2, 24, 8, 8) and not features.requires_grad  # stride 4 of 32 x 32
    context = model.encode(obs)
    assert context.tokens.shape == (2, 2 * 3 + 8 + 1, 32)
    loss = model.loss(obs, torch.randn(2, 16, 3), torch.randn(2, 16, 3), torch.full((2,), 0.5))
    loss.backward()
    assert encoder.film.weight.grad.abs().sum() > 0 and encoder.logits.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in encoder.backbone_parameters())
    model.eval()
    with torch.no_grad():
        text = torch.randn(2, 32)
        one, other = encoder(obs["images"]["front"], text), encoder(obs["images"]["front"], -text)
        assert one.shape == (2, 3, 32) and (one - other).abs().max() > 1e-3  # FiLM: the instruction steers
        cached = {cam: model.image_features(im).half() for cam, im in obs["images"].items()}  # as the cache keeps them
        live = model.encode(obs).tokens
        from_cache = model.encode({k: v for k, v in obs.items() if k != "images"} | {"image_features": cached}).tokens
        assert (live - from_cache).abs().max() < 1e-2  # float16 features; measured ~1e-4
    with torch.no_grad():  # keypoints computed ahead (agent.expert_updates) give the same context, head skipped
        points = model.keypoints(obs)
        assert points.shape == (2, 2, 3, 2)
        ahead = model.encode({k: v for k, v in obs.items() if k != "images"} | {"keypoints": points})
        assert torch.allclose(ahead.tokens, model.encode(obs).tokens, atol=1e-6)
    model.zero_grad()
    model.loss({k: v for k, v in obs.items() if k != "images"} | {"keypoints": points}, torch.randn(2, 16, 3),
               torch.randn(2, 16, 3), torch.full((2,), 0.5)).backward()
    assert encoder.film.weight.grad is None and model.state_proj.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="image_keypoints >= 1"):
        VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film")



def test_global_condition_feeds_state_keypoints_and_instruction_to_every_chunk_token() -> None:
    """``global_condition``: ``Context.condition [B, D]`` from the state, the keypoint coordinates and the instruction;
    the flow loss trains its MLP; without it the context has none and the expert reads only the prefix."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    torch.manual_seed(0)
    config = VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=2, width=32,
                           max_text_len=8, cameras=("front", "wrist"), global_condition=True)
    model = VLA(config)
    assert model.condition[0].in_features == 5 + 2 * 2 * 2 + 32  # state, C x K x (x, y), the instruction's mean
    obs = observation(3, config)
    context = model.encode(obs)
    assert context.condition.shape == (3, 32)
    model.loss(obs, torch.randn(3, 16, 3), torch.randn(3, 16, 3), torch.full((3,), 0.5)).backward()
    assert model.condition[0].weight.grad.abs().sum() > 0
    with torch.no_grad():  # the state reaches the expert through the condition too
        moved = model.encode(dict(obs, state=obs["state"] + 1.0))
        assert (moved.condition - context.condition).abs().max() > 1e-3
    assert VLA(VLAConfig.cpu(5, 3, 50)).encode(observation(2, VLAConfig.cpu(5, 3, 50))).condition is None
    blind = VLA(dataclasses.replace(config, condition_text=False))  # the state and the keypoints only
    assert blind.condition[0].in_features == 5 + 2 * 2 * 2
    with torch.no_grad():  # the instruction reaches it only through where the keypoints land
        state = (obs["state"] - blind.state_mean) / blind.state_std
        expected = blind.condition(torch.cat([state, blind.keypoints(obs).flatten(1)], dim=1))
        assert torch.allclose(blind.encode(obs).condition, expected, atol=1e-6)


def test_the_mlp_action_expert_reads_the_chunk_the_time_and_the_global_condition_only() -> None:
    """``action_expert=mlp``: the velocity of the whole chunk from the flattened chunk, the time and
    ``Context.condition``; the prefix tokens do not reach it (no gradient to the prefix transformer), the condition
    does; the RL agents' expert parameters are the MLP's; it needs the global condition."""
    torch.manual_seed(0)
    config = VLAConfig.cpu(5, 3, 50, width=32, max_text_len=8, chunk_len=4, global_condition=True,
                           action_expert="mlp", expert_hidden=24)
    model = VLA(config)
    assert model.expert.inp.in_features == 4 * 3 and model.expert.films[0].in_features == 2 * 32  # time, condition
    assert model.expert.out[-1].out_features == 4 * 3
    assert model.expert_parameters() == list(model.expert.parameters())
    assert not hasattr(model, "chunk_pos") and not hasattr(model, "action_in")
    obs = observation(2, config)
    context = model.encode(obs)
    x, t = torch.randn(2, 4, 3), torch.tensor([0.3, 0.9])
    with torch.no_grad():
        v = model.velocity(x, t, context)
        assert v.shape == (2, 4, 3)
        other_tokens = dataclasses.replace(context, tokens=torch.randn_like(context.tokens))
        assert torch.equal(model.velocity(x, t, other_tokens), v)
        other_condition = dataclasses.replace(context, condition=context.condition + 1.0)
        assert (model.velocity(x, t, other_condition) - v).abs().max() > 1e-3
        assert (model.velocity(x, t.flip(0), context) - v).abs().max() > 1e-3  # the time is read
    model.loss(obs, torch.randn(2, 4, 3), torch.randn(2, 4, 3), t).backward()
    assert model.condition[0].weight.grad.abs().sum() > 0 and model.expert.inp.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.prefix.parameters())
    with pytest.raises(ValueError, match="global_condition"):
        VLAConfig.cpu(5, 3, 50, action_expert="mlp")
    with pytest.raises(ValueError, match="action_expert"):
        VLAConfig.cpu(5, 3, 50, action_expert="unet")


def test_the_film_head_reads_a_stride_2_or_4_map_with_a_1x1_or_wider_kernel() -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    coarse = VLA(VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=1, width=32))
    fine = VLA(VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=1, width=32,
                             film_stride=2, film_kernel=3))
    assert coarse.image_features(images).shape == (2, 24, 8, 8) and fine.image_features(images).shape == (2, 16, 16, 16)
    assert coarse.image_encoder.inp.kernel_size == (1, 1) and fine.image_encoder.inp.kernel_size == (3, 3)
    obs = observation(2, fine.config)
    assert fine.keypoints(obs).shape == (2, 1, 1, 2) and fine.encode(obs).tokens.shape == (2, 1 + 16 + 1, 32)
    for bad in ({"film_stride": 8}, {"film_kernel": 2}):
        with pytest.raises(ValueError, match="use stride 2 or 4 and an odd kernel"):
            VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=1, **bad)


def test_keypoint_loss_hand_values_and_only_targets_in_the_frame_count() -> None:
    points = torch.tensor([[[0.0, 0.0], [0.5, 0.5]], [[1.0, -1.0], [0.0, 0.0]]])  # [B=2, C=2, 2]
    target = torch.tensor([[[0.3, 0.4], [float("nan"), 0.0]], [[1.0, -1.0], [0.0, 1.5]]])
    # counted: (0, 0) distance^2 0.25 and (1, 0) 0; NaN and outside the frame are not
    assert torch.isclose(keypoint_loss(points, target), torch.tensor(0.125))
    none = torch.full_like(target, float("nan"))
    assert keypoint_loss(points.requires_grad_(), none) == 0.0


def test_the_keypoint_loss_teaches_the_film_keypoint_to_find_a_coloured_square() -> None:
    """``VLA.losses(keypoint_target=...)``: the loss reaches the FiLM head and not the action expert, and trained on
    48 images of a red square at random places the first keypoint finds the square in 16 images it never saw
    (measured 0.06 of the [-1, 1] frame after 150 steps; always guessing the centre is 0.71)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="the [vla] extra: pip install -e '.[vla]'")
    torch.manual_seed(0)
    config = VLAConfig.cpu(5, 3, 50, image_encoder="efficientnet_lite0_film", image_keypoints=2, width=32,
                           max_text_len=8, cameras=("front",))
    model = VLA(config)
    g = torch.Generator().manual_seed(1)
    corner = torch.randint(0, 28, (64, 2), generator=g)  # the square's top-left pixel (x, y) in a 32x32 image
    images = torch.full((64, 3, 32, 32), 90, dtype=torch.uint8)
    for i, (x, y) in enumerate(corner.tolist()):
        images[i, :, y:y + 4, x:x + 4] = torch.tensor([230, 20, 20], dtype=torch.uint8)[:, None, None]
    where = ((corner.float() + 2.0) / 32.0 * 2.0 - 1.0)[:, None, None]  # [64, C=1, P=1, 2] the square's centre
    obs = {k: v for k, v in observation(64, config).items() if k != "images"}
    obs = {"image_features": {"front": model.image_features(images)}, **obs,
           "tokens": obs["tokens"][:1].expand(64, -1), "token_mask": obs["token_mask"][:1].expand(64, -1)}
    assert model.keypoints(obs).shape == (64, 1, 2, 2)
    action, noise, t = torch.randn(64, 16, 3), torch.randn(64, 16, 3), torch.full((64,), 0.5)
    losses = model.losses(obs, action, noise, t, keypoint_target=where)
    assert set(losses) == {"flow", "keypoint"} and losses["keypoint"].shape == (1,)
    losses["keypoint"].sum().backward()
    head = model.image_encoder
    assert head.film.weight.grad.abs().sum() > 0 and head.logits.weight.grad.abs().sum() > 0
    assert model.action_out[1].weight.grad is None  # the keypoint term does not reach the action expert
    train, held = slice(0, 48), slice(48, 64)

    def rows(part: slice) -> dict:
        return {k: ({c: v[part] for c, v in x.items()} if isinstance(x, dict) else x[part]) for k, x in obs.items()}

    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    for _ in range(150):
        optimizer.zero_grad()
        model.losses(rows(train), action[train], noise[train], t[train], keypoint_target=where[train])["keypoint"]\
            .sum().backward()
        optimizer.step()
    with torch.no_grad():
        error = (model.keypoints(rows(held))[:, 0, 0] - where[held, 0, 0]).norm(dim=-1).median()
        centre = where[held, 0, 0].norm(dim=-1).median()
    assert error < 0.3 * centre, (error, centre)
    with pytest.raises(ValueError, match="no instructed keypoints"):
        VLA(VLAConfig.cpu(5, 3, 50)).keypoints(obs)
