"""bench/graph_ops.py counts what a graph would run, and only what is not yet evaluated."""

from __future__ import annotations

import mlx.core as mx

from bench.graph_ops import Counter, count_primitives


def test_counts_unevaluated_primitives_only():
    x = mx.arange(8).astype(mx.float32)
    mx.eval(x)
    y = mx.exp(x) @ mx.ones((8, 8))  # Exp, Full/Broadcast for ones, Matmul
    n = count_primitives([y])
    assert n >= 2
    assert count_primitives([mx.sin(y)]) == n + 1  # one more op on top
    mx.eval(y)
    assert count_primitives([y]) == 0  # evaluated: a leaf, nothing left to run


def test_counter_sees_eval_and_async_eval_and_restores_them():
    real_eval, real_async = mx.eval, mx.async_eval
    with Counter() as c:
        a = mx.ones((4,)) * 3
        mx.eval(a)
        b = mx.sqrt(a)
        mx.async_eval(b)
        mx.eval(b)
    assert c.calls == 3 and c.ops >= 2
    assert mx.eval is real_eval and mx.async_eval is real_async
    assert abs(b[0].item() - 3**0.5) < 1e-6  # the wrapped calls still evaluate


def test_primitives_are_counted_by_name():
    from bench.graph_ops import primitives

    x = mx.arange(8).astype(mx.float32)
    mx.eval(x)
    found = primitives([mx.exp(x) + mx.exp(x * 2)])
    assert found["Exp"] == 2 and found["Add"] == 1 and found["Multiply"] == 1
