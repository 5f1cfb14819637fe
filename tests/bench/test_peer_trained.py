"""bench/peer_trained.py: the chunked gated-delta recurrence it trains with equals mlx-lm's own
position-by-position loop (values and gradients), and a tiny training run writes a hybrid
checkpoint that mlx-lm and specfleet's MTP engine decode alike."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.gated_delta import gated_delta_update, normalize_qk

from bench.peer_trained import chunked_gated_delta, chunked_recurrence, main, unit_lower_inverse
from train.train_default import Corpus


def reference(q, k, v, a, b, A_log, dt_bias, state=None):
    """mlx-lm's ops loop (what its qwen3_5 layers run off Metal)."""
    return gated_delta_update(q, k, v, a, b, A_log, dt_bias, state, use_kernel=False)


def inputs(seed: int, T: int, correlated: bool = False):
    mx.random.seed(seed)
    B, Hk, Hv, D = 2, 2, 4, 32
    q, k = mx.random.normal((B, T, Hk, D)), mx.random.normal((B, T, Hk, D))
    if correlated:  # nearly one key, beta ~1, little decay: where a Neumann-series inverse blows up
        k = k[:, :1] * 0.8 + k * 0.2
    q, k = normalize_qk(q, k, inv_scale=D**-0.5, eps=1e-6)
    v = mx.random.normal((B, T, Hv, D))
    if correlated:
        a, b = mx.full((B, T, Hv), -4.0), mx.full((B, T, Hv), 6.0)
        A_log = mx.log(mx.full((Hv,), 0.01))
    else:
        a, b = mx.random.normal((B, T, Hv)), mx.random.normal((B, T, Hv)) * 2
        A_log = mx.log(mx.random.uniform(1, 16, (Hv,)))
    return q, k, v, a, b, A_log, mx.random.normal((Hv,))


@pytest.mark.parametrize("T,chunk,correlated", [(150, 64, False), (37, 16, False), (130, 64, True)])
def test_chunked_recurrence_equals_mlx_lm_loop(T, chunk, correlated):
    args = inputs(T, T, correlated)
    state = mx.random.normal((2, 4, 32, 32)) * 0.1
    y0, s0 = reference(*args, state)
    y1, s1 = chunked_gated_delta(*args, state, chunk=chunk)
    assert y1.shape == y0.shape and s1.shape == s0.shape
    np.testing.assert_allclose(np.array(y1), np.array(y0), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(np.array(s1), np.array(s0), atol=5e-5, rtol=1e-4)


def test_chunked_recurrence_gradients_equal_mlx_lm_loop():
    q, k, v, a, b, A_log, dt = inputs(5, 45)
    weights = mx.random.normal((2, 45, 4, 32))

    def loss(fn):
        return lambda *x: (fn(*x, A_log, dt)[0] * weights).sum()

    want = mx.grad(loss(reference), argnums=(0, 1, 2, 3, 4))(q, k, v, a, b)
    got = mx.grad(loss(chunked_gated_delta), argnums=(0, 1, 2, 3, 4))(q, k, v, a, b)
    for name, g, w in zip("qkvab", got, want, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(w), atol=2e-5, rtol=1e-4, err_msg=name)


def test_unit_lower_inverse_matches_numpy():
    m = mx.tril(mx.random.normal((3, 32, 32)), -1) * 0.5 + mx.eye(32)
    np.testing.assert_allclose(
        np.array(unit_lower_inverse(m)), np.linalg.inv(np.array(m)), atol=1e-4, rtol=1e-4
    )
    with pytest.raises(ValueError, match="power of two"):
        unit_lower_inverse(mx.eye(12))


def test_chunked_recurrence_is_scoped_to_training():
    from mlx_lm.models import qwen3_5

    before = qwen3_5.gated_delta_update
    with chunked_recurrence():
        assert qwen3_5.gated_delta_update is chunked_gated_delta
    assert qwen3_5.gated_delta_update is before


def test_tiny_training_run_writes_a_checkpoint_every_loader_decodes(tmp_path):
    from mlx_lm import load

    from tests.tiny import reference_greedy
    from workers import Engine, SamplingParams

    # A learnable stream: repeated random phrases, so a few steps lower the loss.
    rng = np.random.default_rng(0)
    phrases = [rng.integers(1, 2048, size=12) for _ in range(8)]
    stream = np.concatenate([phrases[i] for i in rng.integers(0, 8, size=3000)]).astype(np.int32)
    data = Corpus(stream, stream[:4000], "test", 1, ["x.py"])
    data.save(tmp_path / "corpus.npz")
    out = tmp_path / "q35"
    main(
        ["--corpus", str(tmp_path / "corpus.npz"), "--out", str(out), "--preset", "tiny"]
        + ["--target-steps", "30", "--mtp-steps", "20", "--batch", "4", "--seq-len", "64"]
        + ["--lr", "3e-3", "--dtype", "float32"]
    )
    info = json.loads((out / "peer_model.json").read_text())
    assert info["trained"] and info["shape"]["vocab_size"] == 2048
    assert info["target"]["final_loss"] < np.log(2048) - 1.0, info["target"]
    prompts = [stream[:9].tolist(), stream[100:131].tolist()]
    model = load(str(out))[0]
    engine = Engine.load(out, drafter="mtp", max_batch_size=2, draft_depth=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    assert [list(o.tokens) for o in outs] == [reference_greedy(model, p, 16)[0] for p in prompts]
