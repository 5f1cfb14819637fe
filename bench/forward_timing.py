"""Timing helpers shared by the GPU matmul and forward probes (skinny_matmul, matmul_forms,
verify_parts): weights streamed from memory as a model's layers are, and engine forwards over a
cache that holds a fixed context."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

L2_BYTES = 64 << 20  # more than an H100's or H200's L2 (50-60 MB)


def streamed_weights(N: int, K: int) -> list[mx.array]:
    """Enough bf16 copies of an [N, K] weight that cycling through them misses L2."""
    copies = max(2, -(-L2_BYTES // (N * K * 2)))
    ws = [(mx.random.normal((N, K)) * 0.02).astype(mx.bfloat16) for _ in range(copies)]
    mx.eval(ws)
    return ws


def time_calls(fn: Callable, xs: list[mx.array], ws: list[mx.array], reps: int) -> float:
    """Seconds per call over `reps` sweeps of the weight copies, graphs evaluated per sweep."""
    for _ in range(2):
        mx.eval([fn(x, w) for x, w in zip(xs, ws)])
    t0 = time.perf_counter()
    for _ in range(reps):
        mx.eval([fn(x, w) for x, w in zip(xs, ws)])
    return (time.perf_counter() - t0) / (reps * len(ws))


def time_queued(
    fn: Callable, xs: list[mx.array], ws: list[mx.array], calls: int = 64, reps: int = 5
) -> float:
    """Seconds per call with `calls` calls (cycling the weight copies) in one evaluation: the
    device's time per call, the host's launch and sync spread over many (median of `reps`)."""
    batch = [(xs[i % len(xs)], ws[i % len(ws)]) for i in range(calls)]
    mx.eval([fn(x, w) for x, w in batch])
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval([fn(x, w) for x, w in batch])
        times.append((time.perf_counter() - t0) / calls)
    return float(np.median(times))


def forward_cells(
    model: object, shapes: Sequence[tuple[int, int]], context: int = 128, vocab: int = 32000
) -> dict[tuple[int, int], tuple]:
    """(B, W) -> (cache holding `context` random tokens per row, window tokens, valid)."""
    from workers.forward import pad_windows, prefill
    from workers.kv_cache import BatchCache

    rng = np.random.default_rng(0)
    cells = {}
    for B, W in shapes:
        cache = BatchCache.for_model(model, B)
        prefill(model, cache, [rng.integers(0, vocab, context).tolist() for _ in range(B)], 512)
        cells[(B, W)] = (
            cache,
            *pad_windows([rng.integers(0, vocab, W).tolist() for _ in range(B)]),
        )
    return cells


def time_forward_pipelined(model: object, cell: tuple, reps: int = 20) -> float:
    """Seconds per forward with each launched before the last finished (mx.async_eval, as the
    engine's rounds overlap): the device's time where it, not the host, bounds a forward."""
    from workers.forward import forward_window

    cache, tokens, valid = cell
    mx.eval(forward_window(model, cache, tokens, valid))
    t0 = time.perf_counter()
    for _ in range(reps):
        out = forward_window(model, cache, tokens, valid)
        mx.async_eval(out)
    mx.eval(out)
    return (time.perf_counter() - t0) / reps


def time_host(model: object, cell: tuple, reps: int = 10) -> tuple[float, float]:
    """(seconds building one forward's graph in Python, seconds in `mx.async_eval` encoding and
    launching it), medians of `reps`; each forward is waited for before the next is built, so
    neither overlaps the device's work of an earlier one."""
    from workers.forward import forward_window

    cache, tokens, valid = cell
    mx.eval(forward_window(model, cache, tokens, valid))
    build, encode = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = forward_window(model, cache, tokens, valid)
        t1 = time.perf_counter()
        mx.async_eval(out)
        t2 = time.perf_counter()
        mx.eval(out)
        build.append(t1 - t0)
        encode.append(t2 - t1)
    return float(np.median(build)), float(np.median(encode))


def time_forward(model: object, cell: tuple, reps: int = 10) -> float:
    """Seconds per synced forward of one cell's window (nothing committed: same slots each)."""
    from workers.forward import forward_window

    cache, tokens, valid = cell
    mx.eval(forward_window(model, cache, tokens, valid))
    t0 = time.perf_counter()
    for _ in range(reps):
        mx.eval(forward_window(model, cache, tokens, valid))
    return (time.perf_counter() - t0) / reps
