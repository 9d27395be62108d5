"""One chunk convention: the numpy reference executor (deploy) and its torch port (training) agree.

Hand values pin ACT's temporal-ensemble weights ``w_i = exp(-m i)`` with ``i = 0`` the OLDEST prediction
(older predictions weigh more); random chunk streams with resets pin the two implementations to each other.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.deploy.artifact import ChunkExecution
from robot_rl.deploy.chunking import ChunkExecutor as NumpyExecutor
from robot_rl.errors import InputError
from robot_rl.models.chunked_actor import ChunkExecutor as TorchExecutor
from robot_rl.train.export_run import open_loop_execution

A_CHUNK = [[0.0], [1.0], [2.0]]
B_CHUNK = [[10.0], [11.0], [12.0]]
C_CHUNK = [[100.0], [101.0], [102.0]]


def _np_step(ex: NumpyExecutor, chunk: list) -> tuple[bool, float]:
    query = bool(ex.needs_query()[0])
    chunks = np.array([chunk]) if query else np.zeros((0, 3, 1))
    return query, float(ex.step(chunks)[0, 0])


def _torch_step(ex: TorchExecutor, chunk: list) -> tuple[bool, float]:
    query = bool(ex.needs_query()[0])
    chunks = torch.tensor([chunk]) if query else torch.zeros(0, 3, 1)
    return query, float(ex.step(chunks)[0, 0])


@pytest.mark.parametrize("make, step", [
    (lambda **kw: NumpyExecutor(1, 3, 1, **kw), _np_step),
    (lambda **kw: TorchExecutor(1, 3, 1, **kw), _torch_step),
], ids=["numpy", "torch"])
def test_three_steps_by_hand(make, step):
    ex = make(mode="open_loop", execute_len=2)
    # queries a at step 0, plays a[0], a[1]; queries b at step 2 and plays b[0]
    assert [step(ex, c) for c in (A_CHUNK, B_CHUNK, B_CHUNK)] == [(True, 0.0), (False, 1.0), (True, 10.0)]
    ex = make(mode="temporal_ensemble", ensemble_decay=float(np.log(2.0)))  # w = 1, 1/2, 1/4 from the oldest
    got = [step(ex, c)[1] for c in (A_CHUNK, B_CHUNK, C_CHUNK)]
    assert got[0] == pytest.approx(0.0)
    assert got[1] == pytest.approx((1.0 * 1 + 10.0 * 0.5) / 1.5)  # a[1] is the oldest: 4.0 (not 7.0)
    assert got[2] == pytest.approx((2.0 * 1 + 11.0 * 0.5 + 100.0 * 0.25) / 1.75)  # 18.5714...
    ex.reset(np.array([True]) if isinstance(ex, NumpyExecutor) else torch.tensor([True]))
    assert step(ex, B_CHUNK)[1] == pytest.approx(10.0)  # the reset env forgot a and b: only the new chunk


def test_large_decay_is_the_oldest_prediction_without_overflow():
    ex = NumpyExecutor(1, 3, 1, "temporal_ensemble", ensemble_decay=1e6)
    outs = [float(ex.step(np.array([c]))[0, 0]) for c in (A_CHUNK, B_CHUNK, C_CHUNK)]
    assert outs == [0.0, 1.0, 2.0]  # the first chunk, played through, weighs 1; every newer one exp(-1e6) = 0
    tex = TorchExecutor(1, 3, 1, "temporal_ensemble", ensemble_decay=1e6)
    assert [float(tex.step(torch.tensor([c]))[0, 0]) for c in (A_CHUNK, B_CHUNK, C_CHUNK)] == outs


@pytest.mark.parametrize("mode, execute_len, decay", [
    ("open_loop", None, 0.0), ("open_loop", 1, 0.0), ("open_loop", 3, 0.0),
    ("temporal_ensemble", None, 0.0), ("temporal_ensemble", None, 0.01), ("temporal_ensemble", None, 0.7),
])
def test_torch_equals_numpy_on_random_streams_with_resets(mode, execute_len, decay):
    N, H, A, T = 5, 4, 2, 60
    rng = np.random.default_rng(7)
    ref = NumpyExecutor(N, H, A, mode, execute_len, decay)
    port = TorchExecutor(N, H, A, mode, execute_len, decay)
    queries = 0
    for _ in range(T):
        rows = ref.needs_query()
        np.testing.assert_array_equal(port.needs_query().numpy(), rows)
        chunks = rng.uniform(-1, 1, size=(int(rows.sum()), H, A))
        queries += len(chunks)
        want = ref.step(chunks)
        got = port.step(torch.from_numpy(chunks).float())
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
        done = rng.random(N) < 0.15
        ref.reset(done)
        port.reset(torch.from_numpy(done))
    assert queries < N * T if mode == "open_loop" and (execute_len or H) > 1 else queries == N * T


def test_torch_act_queries_only_the_envs_that_need_a_chunk():
    calls = []

    def actor(obs):
        calls.append(obs[:, 0].tolist())
        return obs[:, :1, None] * 10 + torch.arange(3.0)[None, :, None]

    ex = TorchExecutor(2, 3, 1, "open_loop", execute_len=2)
    assert ex.act(torch.tensor([[1.0], [2.0]]), actor)[:, 0].tolist() == [10.0, 20.0]
    assert ex.act(torch.tensor([[0.0], [0.0]]), actor)[:, 0].tolist() == [11.0, 21.0]  # no query
    ex.reset(torch.tensor([False, True]))
    ex.index[0] = 1  # env 0 has one action of its plan left
    assert ex.act(torch.tensor([[5.0], [6.0]]), actor)[:, 0].tolist() == [11.0, 60.0]
    assert calls == [[1.0, 2.0], [6.0]]


@pytest.mark.parametrize("kw, match", [
    ({"mode": "closed_loop"}, "mode must be one of"),
    ({"execute_len": 4}, r"execute_len must be in \[1, chunk_len=3\]"),
    ({"execute_len": 0}, "execute_len must be in"),
    ({"ensemble_decay": -0.1}, "ensemble_decay must be finite and >= 0"),
    ({"ensemble_decay": float("nan")}, "ensemble_decay must be finite and >= 0"),
])
def test_bad_settings_are_refused_by_both(kw, match):
    for cls in (NumpyExecutor, TorchExecutor):
        with pytest.raises(ValueError, match=match):
            cls(1, 3, 1, **kw)


def test_export_execute_len_outside_the_chunk_is_refused_naming_the_range() -> None:
    execution = ChunkExecution("temporal_ensemble", 1, 0.01)
    assert open_loop_execution(execution, 8, 4) == ChunkExecution("open_loop", 4, 0.01)
    for bad in (0, 9):
        with pytest.raises(InputError, match=rf"--execute-len {bad}: .* of 8 action\(s\), so it must be in 1..8"):
            open_loop_execution(execution, 8, bad)
