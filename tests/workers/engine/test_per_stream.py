"""Compiled calls kept per stream (workers/per_stream.py): a trace replays on the stream it was
made on, so each stream must get its own, and a replay must compute what the call computes."""

from __future__ import annotations

import mlx.core as mx

from workers import per_stream


def _fn(x: mx.array, y: mx.array) -> mx.array:
    return mx.exp(x) * y + 1


def test_one_compiled_function_a_stream_with_the_plain_call_s_results():
    table: dict = {}
    x, y = mx.random.normal((4, 8)), mx.random.normal((4, 8))
    first = per_stream.compiled_call(table, _fn)
    assert per_stream.compiled_call(table, _fn) is first  # kept: traced once per shape
    assert mx.allclose(first(x, y), _fn(x, y)).item()
    other = mx.new_stream(mx.default_device())
    with mx.stream(other):
        second = per_stream.compiled_call(table, _fn)
        assert second is not first
        assert mx.allclose(second(x, y), _fn(x, y)).item()
    assert len(table) == 2


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(per_stream, "MAX_STREAMS", 2)
    table: dict = {}
    for _ in range(3):
        with mx.stream(mx.new_stream(mx.default_device())):
            per_stream.compiled_call(table, _fn)
    assert len(table) <= 2
