"""Per-row processors against straightforward per-row numpy / mlx-lm references."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_presence_penalty, make_repetition_penalty

from workers.sampling.keys import gumbel_noise
from workers.sampling.processors import (
    BatchSampling,
    _thresholds,
    apply_penalties,
    sample,
    token_presence,
    warp,
    window_presence,
)
from workers.types import SamplingParams

V = 50


def ref_warp(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """One row slot, written the obvious way (float64)."""
    x = logits.astype(np.float64)
    if sp.temperature == 0:
        return x
    x = x / sp.temperature
    keep = np.ones(V, dtype=bool)
    order = np.argsort(-x, kind="stable")
    if sp.top_k:
        keep[order[sp.top_k :]] = False
    if sp.top_p < 1.0:
        z = np.where(keep, x, -np.inf)
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        mass = 0.0
        kept = np.zeros(V, dtype=bool)
        for t in np.argsort(-z, kind="stable"):
            if mass >= sp.top_p or not keep[t]:
                break
            kept[t] = True
            mass += probs[t]
        keep &= kept
    if sp.min_p > 0:
        keep &= x >= x.max() + np.log(sp.min_p)
    return np.where(keep, x, -np.inf)


PARAMS = [
    SamplingParams(temperature=0.0, top_k=3, top_p=0.5),  # greedy: filters ignored
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.3, top_k=5),
    SamplingParams(temperature=1.0, top_p=0.8),
    SamplingParams(temperature=0.6, top_k=10, top_p=0.9, min_p=0.05),
    SamplingParams(temperature=1.5, min_p=0.2),
]


@pytest.mark.parametrize("candidates", [(), (3,), (8,), (2, 20)])
def test_warp_matches_per_row_reference(candidates):
    """Also with top-k/top-p candidate sets smaller than the vocabulary (and the fallback)."""
    rng = np.random.default_rng(0)
    W = 3
    logits = rng.normal(scale=3.0, size=(len(PARAMS), W, V)).astype(np.float32)
    bs = BatchSampling.from_params(PARAMS, seeds=range(len(PARAMS)))
    got = np.array(warp(mx.array(logits), bs, candidates=candidates))
    for b, sp in enumerate(PARAMS):
        for i in range(W):
            want = ref_warp(logits[b, i], sp)
            np.testing.assert_array_equal(np.isinf(got[b, i]), np.isinf(want), err_msg=f"row {b}")
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[b, i][fin], want[fin], rtol=1e-5)


def test_sample_greedy_rows_ignore_noise_and_sampled_rows_respect_masks():
    rng = np.random.default_rng(1)
    logits = mx.array(rng.normal(size=(len(PARAMS), 1, V)).astype(np.float32))
    bs = BatchSampling.from_params(PARAMS, seeds=range(len(PARAMS)))
    warped = warp(logits, bs)
    draws = []
    for pos in range(300):
        g = gumbel_noise(bs.seeds, [pos] * len(PARAMS), 1, V)
        draws.append(np.array(sample(warped, g, bs))[:, 0])
    draws = np.array(draws)  # [300, B]
    assert (draws[:, 0] == int(mx.argmax(logits[0, 0]).item())).all()
    w = np.array(warped)[:, 0]
    for b in range(1, len(PARAMS)):
        assert np.isfinite(w[b, draws[:, b]]).all()  # never a masked token
        assert len(set(draws[:, b].tolist())) > 1  # actually random
    assert set(draws[:, 2].tolist()) <= set(np.argsort(-np.array(logits)[2, 0])[:5].tolist())


def test_window_presence_sees_drafts_before_the_slot():
    base = token_presence([[1, 2], [7]], V)
    drafts = mx.array([[3, 4, 5], [9, -1, -1]])
    got = np.array(window_presence(base, drafts, 4))
    for i in range(4):
        assert set(np.nonzero(got[0, i])[0].tolist()) == {1, 2} | {3, 4, 5}.intersection(
            [3, 4, 5][:i]
        )
    assert set(np.nonzero(got[1, 3])[0].tolist()) == {7, 9}  # padding (-1) adds nothing


def test_penalties_match_mlx_lm_processors():
    rng = np.random.default_rng(2)
    prompt = [[1, 2, 3], [4, 4, 5]]
    output = [[3, 10], [11]]
    params = [
        SamplingParams(temperature=0.8, repetition_penalty=1.3, presence_penalty=0.0),
        SamplingParams(temperature=0.0, repetition_penalty=1.0, presence_penalty=0.7),
    ]
    bs = BatchSampling.from_params(params, seeds=[0, 1])
    logits = rng.normal(scale=2.0, size=(2, 1, V)).astype(np.float32)
    seen = token_presence([p + o for p, o in zip(prompt, output, strict=True)], V)[:, None]
    gen = token_presence(output, V)[:, None]
    got = np.array(apply_penalties(mx.array(logits), seen, gen, bs))
    rep = make_repetition_penalty(1.3, context_size=100)
    want0 = np.array(rep(mx.array(prompt[0] + output[0]), mx.array(logits[0])))
    np.testing.assert_allclose(got[0], want0, rtol=1e-6)
    pres = make_presence_penalty(0.7, context_size=100)
    want1 = np.array(pres(mx.array(output[1]), mx.array(logits[1])))
    np.testing.assert_allclose(got[1], want1, rtol=1e-6)


def test_top_k_at_or_above_vocab_keeps_everything():
    logits = mx.array(np.random.default_rng(3).normal(size=(2, 1, V)).astype(np.float32))
    params = [
        SamplingParams(temperature=1.0, top_k=V),
        SamplingParams(temperature=1.0, top_k=10 * V),
    ]
    got = np.array(warp(logits, BatchSampling.from_params(params, seeds=[0, 1])))
    np.testing.assert_allclose(got, np.array(logits), rtol=1e-6)


def test_candidate_thresholds_are_exact_when_the_nucleus_fits():
    rng = np.random.default_rng(4)
    x = mx.array(rng.normal(scale=4.0, size=(4, 2, V)).astype(np.float32))
    params = [
        SamplingParams(temperature=1.0, top_k=3),
        SamplingParams(temperature=1.0, top_p=0.3),
        SamplingParams(temperature=1.0, top_k=6, top_p=0.9),
        SamplingParams(temperature=1.0),
    ]
    bs = BatchSampling.from_params(params, seeds=range(4))
    full, _ = _thresholds(x, mx.sort(x, axis=-1)[..., ::-1], bs)
    part, complete = _thresholds(x, mx.sort(mx.topk(x, 8, axis=-1), axis=-1)[..., ::-1], bs)
    assert np.array(complete).all()
    np.testing.assert_array_equal(np.array(part), np.array(full))
    # A nucleus wider than the candidates is reported incomplete (warp then sorts fully).
    wide = BatchSampling.from_params([SamplingParams(temperature=1.0, top_p=0.999)] * 4, range(4))
    _, complete = _thresholds(x, mx.sort(mx.topk(x, 2, axis=-1), axis=-1)[..., ::-1], wide)
    assert not np.array(complete).all()
