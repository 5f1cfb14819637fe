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


def test_proposal_counter_counts_the_drafters_graph_and_restores_propose():
    """ProposalCounter sees each proposal's graph (only the drafter's part of a round)."""
    from types import SimpleNamespace

    from bench.graph_ops import ProposalCounter

    class Drafter:
        def propose(self, request):
            return SimpleNamespace(tokens=mx.argmax(mx.exp(request), axis=-1))

    drafter = Drafter()
    x = mx.ones((2, 4))
    mx.eval(x)
    with ProposalCounter(drafter) as d:
        drafter.propose(x)
        drafter.propose(x)
    assert d.calls == 2 and d.ops == 2 * count_primitives([mx.argmax(mx.exp(x), axis=-1)])
    assert d.by_name["Exp"] == 2 and "propose" not in vars(drafter)
