"""What one primitive costs the host on this backend: building it in Python, then dispatching it.

    python -m bench.dispatch_cost [--chain 200] [--batch 8] [--out FILE]

A small model's round on a GPU is bound by the host (bench/graph_ops.py, profile_round.py): the
device finishes each round before the host has built the next. There a round's cost is the sum
of its primitives' host costs, and those differ by kind: a view is metadata, an elementwise op
one kernel, a custom kernel a lookup of its compiled build. Each case chains `--chain` ops of
one kind on small arrays and times three phases, per op, median over repeats:

- build: the Python calls that make the lazy graph;
- launch: `mx.async_eval` of it (encoding and dispatching every kernel, what the engine's host
  pays per round);
- wait: from then until the device is done (`mx.synchronize`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

Case = Callable[[mx.array], mx.array]  # one op (or a fixed few) on x [B, H]


def cases(B: int, H: int, dtype: mx.Dtype) -> dict[str, tuple[int, Case]]:
    """name -> (primitives per call, x -> x of the same shape and dtype)."""
    rng = np.random.default_rng(0)
    w = mx.array(rng.standard_normal((H, H)).astype(np.float32) / H**0.5).astype(dtype)
    norm_w = mx.ones((H,), dtype)
    idx = mx.array(rng.integers(0, H, (B, H)).astype(np.int32))
    one = mx.array(1.0, dtype)
    # The per-row gemv route's call (workers/row_linear.py): gather_mm with every row pointing at
    # the one [1, H, H] weight view, between the two reshapes the route adds.
    rows, zero = mx.arange(B, dtype=mx.uint32), mx.zeros((B,), dtype=mx.uint32)
    w_rows = w.T[None]
    mx.eval(w_rows, rows, zero)
    out: dict[str, tuple[int, Case]] = {
        "reshape (view)": (2, lambda x: x.reshape(B, H // 2, 2).reshape(B, H)),
        "add": (1, lambda x: x + one),
        "add, compiled chain of 4": (1, mx.compile(lambda x: (((x + one) * one) + one) * one)),
        "rms_norm (fast)": (1, lambda x: mx.fast.rms_norm(x, norm_w, 1e-6)),
        "matmul": (1, lambda x: x @ w),
        "row route (gather_mm + 2 reshapes)": (
            3,
            lambda x: mx.gather_mm(
                x.reshape(B, 1, H), w_rows, lhs_indices=rows, rhs_indices=zero
            ).reshape(B, H),
        ),
        "astype there and back": (2, lambda x: x.astype(mx.float32).astype(dtype)),
        "concatenate + slice": (2, lambda x: mx.concatenate([x, x], axis=1)[:, :H]),
        "take_along_axis": (1, lambda x: mx.take_along_axis(x, idx, axis=1)),
        "put_along_axis": (1, lambda x: mx.put_along_axis(x, idx, x, axis=1)),
        "argmax + add": (3, lambda x: x + mx.argmax(x, axis=-1, keepdims=True).astype(dtype)),
        "where": (1, lambda x: mx.where(x > 0, x, one)),
    }
    if mx.default_device() == mx.gpu and mx.cuda.is_available():
        out.update(_cuda_kernel_cases(B, dtype))
    return out


def _cuda_kernel_cases(B: int, dtype: mx.Dtype) -> dict[str, tuple[int, Case]]:
    """The engine's own CUDA kernels, each call reading x (so calls chain)."""
    from workers.attention_cuda import ragged_window_attention
    from workers.gdn_recurrence import cuda_recurrence

    Hk, Hv, D, S = 4, 8, 48, 128
    rng = np.random.default_rng(1)

    def arr(*shape: int, dt: mx.Dtype = dtype) -> mx.array:
        return mx.array(rng.standard_normal(shape).astype(np.float32) * 0.1).astype(dt)

    q, k, v = arr(B, 1, Hk, D), arr(B, 1, Hk, D), arr(B, 1, Hv, D)
    g, beta = mx.full((B, 1, Hv), 0.9), mx.full((B, 1, Hv), 0.5)
    state = arr(B, Hv, D, D, dt=mx.float32)
    mask = mx.ones((B, 1), dtype=mx.bool_)
    kq, kk, kv = arr(B, 8, 1, 64), arr(B, 2, S, 64), arr(B, 2, S, 64)
    lengths = mx.full((B,), S // 2, dtype=mx.int32)

    def gdn(x: mx.array) -> mx.array:  # the state rides on x's first element
        y, s = cuda_recurrence(q, k, v, g, beta, state + x[0, 0].astype(mx.float32), mask)
        return x + s[0, 0, 0, 0].astype(x.dtype)

    def attention(x: mx.array) -> mx.array:
        o = ragged_window_attention(kq + x[0, 0], kk, kv, lengths, 0.125)
        return x + o[0, 0, 0, 0]

    return {
        "gated-delta CUDA kernel (+4 small ops)": (5, gdn),
        "ragged attention CUDA kernel (+5 small ops)": (6, attention),
    }


def phase_times(build: Callable[[], list[mx.array]], repeats: int, warm: int = 2) -> dict:
    """Median seconds of `build()` (Python making the lazy graph), `mx.async_eval` of what it
    returns (launch) and `mx.synchronize` after that (wait), over `repeats` after `warm`."""
    phases: dict[str, list[float]] = {"build": [], "launch": [], "wait": []}
    for rep in range(repeats + warm):  # warm-ups: kernels built, graphs cached
        t0 = time.perf_counter()
        outs = build()
        t1 = time.perf_counter()
        mx.async_eval(outs)
        t2 = time.perf_counter()
        mx.synchronize()
        t3 = time.perf_counter()
        if rep >= warm:
            for name, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
                phases[name].append(dt)
    return {k: float(np.median(v)) for k, v in phases.items()}


def measure(case: Case, per_call: int, x0: mx.array, chain: int, repeats: int) -> dict:
    mx.eval(x0)

    def build() -> list[mx.array]:
        x = x0
        for _ in range(chain):
            x = case(x)
        return [x]

    ops = chain * per_call
    return {f"{k}_us_per_op": 1e6 * v / ops for k, v in phase_times(build, repeats).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gpu = mx.default_device() == mx.gpu
    dtype = mx.bfloat16 if gpu else mx.float32
    x0 = mx.zeros((args.batch, args.hidden), dtype)
    rows = {}
    for name, (per_call, case) in cases(args.batch, args.hidden, dtype).items():
        rows[name] = measure(case, per_call, x0, args.chain, args.repeats)
        r = rows[name]
        print(f"{name:45s} build {r['build_us_per_op']:6.2f}  launch {r['launch_us_per_op']:6.2f}"
              f"  wait {r['wait_us_per_op']:6.2f} us/op", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"device": str(mx.default_device()), "mlx": mx.__version__,
                                        "dtype": str(dtype), "batch": args.batch,
                                        "chain": args.chain, "rows": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
