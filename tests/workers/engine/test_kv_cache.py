"""Compaction: after mixed accepts every row holds exactly its committed tokens, contiguously."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny import mixed_prompts, tiny_model
from tests.workers.engine.test_kv_quant_parity import tiny32
from workers.cache_rows import fill_holes
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant


def row_alone_keys(model, tokens: list[int]) -> list[mx.array]:
    """Keys of every layer after prefilling `tokens` into a one-row cache: [1, H, L, D]."""
    cache = BatchCache.for_model(model, 1)
    prefill(model, cache, [tokens], step_size=512)
    L = len(tokens)
    return [layer.keys[:, :, :L] for layer in cache.layers]


def test_mixed_accepts_leave_contiguous_rows_without_stale_keys():
    model = tiny_model("qwen3", seed=5)
    K = 4
    accepts = [0, K, 2, 1]
    prompts = mixed_prompts(4, seed=2, lengths=[3, 11, 6, 20])
    cache = BatchCache.for_model(model, 4)
    prefill(model, cache, prompts, step_size=512)
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 256, size=K + 1).tolist() for _ in prompts]
    tokens, _ = pad_windows(windows)
    forward_window(model, cache, tokens, np.full(4, K + 1))  # writes K+1 keys per row
    cache.commit(np.array(accepts) + 1)
    mx.eval(cache.state_arrays())

    committed = [p + w[: a + 1] for p, w, a in zip(prompts, windows, accepts)]
    assert cache.lengths.tolist() == [len(c) for c in committed]
    # The next RoPE position of each row is its length: no holes.
    assert cache.layers[0].offset.tolist() == [len(c) for c in committed]
    for r, seq in enumerate(committed):
        alone = row_alone_keys(model, seq)
        for layer, ref in zip(cache.layers, alone):
            got = layer.keys[r : r + 1, :, : len(seq)]
            assert mx.allclose(got, ref, atol=1e-5).item(), f"row {r} keys differ"

    # Stale keys (rejected drafts, other rows' longer windows) are masked for the next window.
    W = 3
    mask = np.array(cache.window_mask(W))  # [B, 1, W, S]
    for r, seq in enumerate(committed):
        L = len(seq)
        for i in range(W):
            visible = np.flatnonzero(mask[r, 0, i])
            assert visible.tolist() == list(range(L + i + 1)), (r, i)


def test_compaction_cost_does_not_touch_the_context():
    """commit/rollback only move lengths; the key buffers are the same arrays afterwards."""
    model = tiny_model("llama", seed=1)
    cache = BatchCache.for_model(model, 2)
    prefill(model, cache, [[1] * 300, [2] * 40], step_size=128)
    before = [id(layer.keys) for layer in cache.layers]
    cache.commit(np.array([3, 1]))
    cache.rollback(np.array([2, 0]))
    assert [id(layer.keys) for layer in cache.layers] == before
    assert cache.lengths.tolist() == [301, 41]


def test_keep_and_append_rows_preserve_each_rows_cache():
    model = tiny_model("llama", seed=1)
    prompts = mixed_prompts(3, seed=4, lengths=[5, 9, 2])
    cache = BatchCache.for_model(model, 3)
    prefill(model, cache, prompts, step_size=512)
    joiner = BatchCache.for_model(model, 1)
    prefill(model, joiner, [[7, 8, 9, 10]], step_size=512)
    cache.keep_rows([2, 0])
    cache.append(joiner)
    assert cache.lengths.tolist() == [2, 5, 4]
    for r, seq in enumerate([prompts[2], prompts[0], [7, 8, 9, 10]]):
        ref = row_alone_keys(model, seq)[0]
        assert mx.allclose(cache.layers[0].keys[r : r + 1, :, : len(seq)], ref, atol=1e-5).item()


def test_attention_reads_exactly_the_slots_in_use_unless_shapes_cost_builds(monkeypatch):
    """Only where each new shape is a graph build (MLX CUDA) is the span rounded up to SPAN
    slots. Elsewhere a stale slot is pure cost: its score still takes an exp, ~12 ns each on
    MLX's x86 CPU backend (a 140-token prefill attending 256 slots: 66-70 ms, against 60 ms
    exact, which is mlx-lm's own KVCache prefill)."""
    from workers import kv_cache
    from workers.backend import Backend

    model = tiny_model("qwen3", seed=5)
    prompts = mixed_prompts(2, seed=3, lengths=[140, 9])
    spans = {}
    for builds in (False, True):
        monkeypatch.setattr(Backend, "current", classmethod(lambda cls, b=builds: cls(b, not b)))
        cache = BatchCache.for_model(model, 2)
        prefill(model, cache, prompts, step_size=512)
        cache.set_window_valid(np.ones(2, dtype=np.int64))
        keys, _ = cache.layers[0].update_and_fetch(
            *[mx.zeros((2, model.args.num_key_value_heads, 1, model.args.head_dim))] * 2
        )
        spans[builds] = (cache.window_end(1), keys.shape[2])
    assert spans[False] == (141, 141), spans
    assert spans[True] == (2 * kv_cache.SPAN, 2 * kv_cache.SPAN), spans


def test_where_shapes_cost_builds_prefill_widths_round_up_and_outputs_do_not_change(monkeypatch):
    """On MLX CUDA a prefill chunk's width rounds up to the attention span (prompts of similar
    lengths share a graph); the padding is after each row's tokens, never committed, and the
    engine's greedy outputs stay mlx-lm's."""
    from tests.tiny import reference_greedy
    from tests.workers.engine.test_parity import assert_matches
    from workers import Engine, SamplingParams
    from workers.backend import Backend

    model = tiny_model("qwen3", seed=5)
    prompts = mixed_prompts(3, seed=4, lengths=[5, 37, 130])
    monkeypatch.setattr(Backend, "current", classmethod(lambda cls: cls(True, False)))
    widths = []
    real = pad_windows

    def spy(windows, width=1):  # type: ignore[no-untyped-def]
        out = real(windows, width)
        widths.append(out[0].shape[1])
        return out

    monkeypatch.setattr("workers.forward.pad_windows", spy)
    cache = BatchCache.for_model(model, 3)
    prefill(model, cache, prompts, step_size=512)
    assert widths == [256] and cache.lengths.tolist() == [5, 37, 130], widths
    outs = Engine(model, max_batch_size=3).generate(prompts, SamplingParams(max_tokens=12))
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(model, p, 12), "padded prefill")


def test_a_lone_rows_one_token_step_reads_its_exact_slots_unmasked(monkeypatch):
    """One row, one token, exact host length: attention gets no mask and exactly the row's
    slots, even where spans round up (MLX CUDA), so it takes the kernel mlx-lm's own decode
    takes. Two rows, a wider window, or a model asking for an array mask keep the mask."""
    from workers.backend import Backend

    monkeypatch.setattr(Backend, "current", classmethod(lambda cls: cls(True, False)))
    model = tiny_model("qwen3", seed=5)
    lone = BatchCache.for_model(model, 1)
    prefill(model, lone, [list(range(1, 41))], step_size=512)
    layer = lone.layers[0]
    lone.set_window_valid(np.array([1]))
    assert layer.make_mask(1) is None and lone.window_end(1) == 41
    assert layer.make_mask(1, return_array=True) is not None
    lone.set_window_valid(np.array([2]))
    assert layer.make_mask(2) is not None and lone.window_end(2) % 128 == 0
    pair = BatchCache.for_model(model, 2)
    prefill(model, pair, [list(range(1, 41))] * 2, step_size=512)
    pair.set_window_valid(np.array([1, 1]))
    assert pair.layers[0].make_mask(1) is not None


def test_a_lone_row_behind_its_host_bound_keeps_the_mask():
    """After a lazy commit the host's length is an upper bound: the slots past the row's true
    length are stale and must stay masked. The next step's logits equal those of a cache that
    holds exactly the row's tokens; once the bound is tightened to the exact length the step
    goes unmasked and still matches."""
    model = tiny_model("qwen3", seed=5)
    prompt, window = list(range(3, 30)), [7, 8, 9, 10]
    cache = BatchCache.for_model(model, 1)
    prefill(model, cache, [prompt], step_size=512)
    tokens, valid = pad_windows([window])
    forward_window(model, cache, tokens, valid)
    cache.commit_lazy(mx.array([2]), 4)  # the device keeps 2 of the 4; the host says 4
    ref = BatchCache.for_model(model, 1)
    prefill(model, ref, [prompt + window[:2]], step_size=512)
    step, one = mx.array([[11]]), np.array([1])
    expected = forward_window(model, ref, step, one)
    got = forward_window(model, cache, step, one)
    assert mx.allclose(got, expected, atol=1e-5).item(), "a stale slot was attended"
    assert cache.layers[0].make_mask(1) is not None
    cache.tighten(np.array([len(prompt) + 2]), np.array([True]), exact=True)
    assert cache.layers[0].make_mask(1) is None
    assert mx.allclose(forward_window(model, cache, step, one), expected, atol=1e-5).item()


def test_fill_holes_moves_only_the_rows_past_the_new_end():
    assert fill_holes([0, 1, 3, 4, 5], 6) == [0, 1, 5, 3, 4]
    assert fill_holes([2, 3], 4) == [2, 3]  # both holes taken by the tail, in order
    assert fill_holes([0, 1], 4) == [0, 1]  # the tail left: nothing moves
    assert fill_holes([], 3) == []
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        keep = sorted(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).tolist())
        order = fill_holes(keep, n)
        assert sorted(order) == keep  # the same rows, once each
        assert all(j == i or j >= len(keep) for i, j in enumerate(order))  # stayers stay


@pytest.mark.parametrize("bits", [None, 8])
def test_rows_leave_and_join_in_place_and_the_next_forward_is_unchanged(bits):
    """With row_capacity the arrays keep their rows (moved rows and joiners are written in
    place), each row's keys are its own, and a forward over the batch gives the same logits,
    bit for bit, as a cache that concatenates and gathers every row; then a leave that keeps
    fewer than half the rows gathers them (the arrays shrink), and a joiner longer than the
    running rows' slots still lands whole."""
    model = tiny32("qwen3", seed=2)  # head_dim 32: a quantization group fits
    quant = KVQuant(bits, 32) if bits else None
    prompts = mixed_prompts(4, seed=9, lengths=[6, 13, 3, 9])
    joining = [[5, 6, 7], [9, 10, 11, 12, 13]]
    long_joiner = mixed_prompts(1, seed=3, lengths=[300])
    logits = {}
    for capacity in (0, 6):
        cache = BatchCache.for_model(model, 4, quant, row_capacity=capacity)
        prefill(model, cache, prompts, step_size=512)
        cache.keep_rows(fill_holes([0, 2, 3], 4))  # row 1 leaves, row 3 takes its place
        cache.append(prefilled(model, joining, quant))
        rows = [prompts[0], prompts[3], prompts[2], *joining]
        assert cache.lengths.tolist() == [len(r) for r in rows]
        if capacity:  # in place: the arrays hold 6 rows (4, then 3 and 5 of them in use)
            assert {len(p) for x in cache.layers for p in x.key_parts} == {6}
        assert_rows_hold(model, cache, rows, quant)
        window = mx.array([[3, 4], [8, 1], [2, 2], [7, 7], [1, 9]])
        logits[capacity] = forward_window(model, cache, window, np.full(5, 2))
        mx.eval(logits[capacity])
        cache.commit(np.full(5, 2))
        order = fill_holes([1, 4], 5)  # 2 of 5 stay: fewer than half of 6 rows
        cache.keep_rows(order)
        cache.append(prefilled(model, long_joiner, quant))
        rows = [r + w for r, w in zip(rows, window.tolist())]
        rows = [*(rows[i] for i in order), long_joiner[0]]
        if capacity:  # gathered to 2, then grown for the joiner (past 256 slots)
            assert {p.shape[:3:2] for x in cache.layers for p in x.key_parts} == {(4, 512)}
        assert_rows_hold(model, cache, rows, quant)
    assert mx.array_equal(logits[0], logits[6]).item()


def prefilled(model, prompts: list[list[int]], quant) -> BatchCache:
    cache = BatchCache.for_model(model, len(prompts), quant)
    prefill(model, cache, prompts, step_size=512)
    return cache


def assert_rows_hold(model, cache: BatchCache, rows: list[list[int]], quant) -> None:
    """Each row's keys (decoded where quantized) equal its tokens prefilled alone."""
    assert cache.lengths.tolist() == [len(r) for r in rows]
    for r, seq in enumerate(rows):
        alone = prefilled(model, [seq], quant)
        for layer, ref in zip(cache.layers, alone.layers):
            got, want = (x.fetch(x.key_parts, len(seq)) for x in (layer, ref))
            got = got[r : r + 1] if isinstance(got, mx.array) else got[0][r : r + 1]
            want = want if isinstance(want, mx.array) else want[0]
            assert mx.allclose(got, want, atol=1e-5).item(), r
