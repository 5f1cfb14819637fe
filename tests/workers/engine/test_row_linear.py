"""Few-row linear layers as per-row gemvs (workers/row_linear.py), forced on the CPU."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from tests.tiny import OracleDrafter, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, row_linear


def test_each_row_equals_the_one_row_linear_and_only_small_bias_free_layers_route():
    mx.random.seed(0)
    small, biased = nn.Linear(64, 96, bias=False), nn.Linear(64, 96)
    big = nn.Linear(1024, 1024, bias=False)  # 4 MiB of fp32: past WEIGHT_BYTES_MAX
    odd = nn.Linear(72, 96, bias=False)  # an input width MLX's gemv does not take
    tree = nn.Sequential(small, biased, big, odd)
    assert row_linear.install(tree) == 1
    assert type(small) is row_linear.RowLinear
    assert type(biased) is nn.Linear and type(big) is nn.Linear and type(odd) is nn.Linear
    x = mx.random.normal((2, 3, 64))  # 6 rows
    y = small(x)
    assert y.shape == (2, 3, 96)
    one_row = mx.stack([x.reshape(6, 64)[i : i + 1] @ small.weight.T for i in range(6)])
    assert mx.array_equal(y.reshape(6, 96), one_row.reshape(6, 96)).item()
    many = mx.random.normal((row_linear.ROWS_MAX + 1, 64))  # past ROWS_MAX: the plain matmul
    assert mx.array_equal(small(many), many @ small.weight.T).item()
    row_linear.remove(tree)
    assert type(small) is row_linear.ViewLinear  # the engine's own linear


def test_rows_times_weight_bytes_bound_the_route(monkeypatch):
    """A call routes while its rows x weight bytes stay within ROW_BYTES_MAX (what its gemvs
    read): past it, the same layer takes the GEMM again, at any ROWS_MAX."""
    from bench.graph_ops import primitives

    mx.random.seed(2)
    layer = nn.Linear(64, 96, bias=False)  # 24 KiB of fp32
    row_linear.install(nn.Sequential(layer))
    monkeypatch.setattr(row_linear, "ROWS_MAX", 64)
    monkeypatch.setattr(row_linear, "ROW_BYTES_MAX", 8 * layer.weight.nbytes)
    for rows, routed in ((2, True), (8, True), (9, False), (64, False)):
        x = mx.random.normal((rows, 64))
        ops = primitives([layer(x)])
        assert ("GatherMM" in ops) is routed and ("Matmul" in ops) is not routed, (rows, ops)
        assert mx.allclose(layer(x), x @ layer.weight.T, atol=1e-5).item()


def test_engine_with_the_route_decodes_like_mlx_lm(monkeypatch):
    """The route forced on (as on MLX CUDA) for a hybrid target: verify windows of up to 4
    tokens and batches of up to 5 rows run their linears as per-row gemvs."""
    monkeypatch.setenv(row_linear.ENV, "1")
    model = tiny_model("qwen3_5", seed=3, layers=4)
    prompts = mixed_prompts(5, seed=4)
    refs = [reference_greedy(model, p, 16) for p in prompts]
    oracle = OracleDrafter({tuple(p): r[0] for p, r in zip(prompts, refs)})
    for drafter in (None, oracle):
        engine = Engine(model, drafter=drafter, max_batch_size=5, draft_depth=3)
        routed = [m for _, m in model.named_modules() if type(m) is row_linear.RowLinear]
        assert routed, "the engine must have installed the route"
        outs = engine.generate(prompts, SamplingParams(max_tokens=16))
        for i, (o, ref) in enumerate(zip(outs, refs)):
            assert_matches(o.tokens, ref, f"row route, drafter={drafter is not None}, row {i}")
    row_linear.remove(model)
    assert np.all([type(m) is not row_linear.RowLinear for _, m in model.named_modules()])


def test_the_weights_view_is_made_once_and_follows_a_replaced_weight():
    """The [1, K, N] view gather_mm reads is made on the first call only (no view ops in later
    graphs), and a weight replaced by update() gets its own view, not the old weight's."""
    from bench.graph_ops import primitives

    mx.random.seed(1)
    layer = nn.Linear(64, 96, bias=False)
    row_linear.install(nn.Sequential(layer))
    x = mx.random.normal((4, 64))
    first = layer(x)
    mx.eval(first)
    later = primitives([layer(x)])
    assert "Transpose" not in later and "ExpandDims" not in later, later
    new_weight = mx.random.normal((96, 64))
    layer.update({"weight": new_weight})
    assert mx.allclose(layer(x), x @ new_weight.T, atol=1e-5).item()
    assert not mx.allclose(layer(x), first, atol=1e-3).item()


def test_held_views_stay_bounded_and_threads_share_one_module():
    """At most `keep` views are held per module (the oldest goes first), and threads making
    views of one module at once each get their own key's view, with no error."""
    import threading

    module = nn.Linear(8, 8, bias=False)
    sources = [mx.full((4, 4), float(i)) for i in range(12)]
    mx.eval(sources)  # a thread can evaluate only graphs built on its own stream

    def make(s: mx.array) -> mx.array:
        view = s.T
        mx.eval(view)  # evaluated where it is made (as the engine's views are)
        return view

    for i, s in enumerate(sources):
        row_linear.held_view(module, i, s, lambda s=s: make(s), keep=3)
    assert list(module.__dict__["_held"]) == [9, 10, 11]
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        try:
            for step in range(300):
                key = (seed, step % 5)
                s = sources[(seed + step) % len(sources)]
                view = row_linear.held_view(module, key, s, lambda s=s: make(s), keep=2)
                assert view.shape == (4, 4) and view[0, 0].item() == s[0, 0].item()
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors.append(e)

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert len(module.__dict__["_held"]) <= 2 + len(threads)  # each thread adds at most one past
