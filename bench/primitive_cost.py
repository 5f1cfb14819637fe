"""Host time MLX spends per graph node, by kind: is a view node (Reshape) as dear as a kernel?

    python -m bench.primitive_cost [--nodes 200] [--reps 30] [--out F.json]

A small model's round on MLX CUDA is bound by the launcher thread's encode, ~4.5 us a node
(bench/results/s57). A hybrid MTP round is ~800 nodes, of which ~370 are views (Reshape,
ExpandDims, Transpose, Broadcast, Squeeze). Whether removing views pays depends on what one
costs against a kernel: this times `mx.async_eval` (the host's encode) and the wall to
`mx.eval` of chains of `--nodes` nodes of one kind on a [64, 1024] input of the model's dtype:
  reshape   x -> [64, 1, 1024] -> [64, 1024] -> ... (views, no kernel)
  add       x + 1, chained (one elementwise kernel each)
  gather_mm the per-row gemv route's node (workers/row_linear.py) with its two reshapes
  matmul    x @ w with w [1024, 1024] (cuBLASLt at 64 rows)
Each figure is the median over `--reps` chains, in microseconds per node.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
import numpy as np


def chain(kind: str, x: mx.array, w: mx.array, wv: mx.array, idx: tuple, n: int) -> mx.array:
    """`n` nodes of `kind` after x (gather_mm: n // 3 calls of three nodes each)."""
    y = x
    if kind == "reshape":
        for i in range(n):
            y = y.reshape(64, 1, 1024) if i % 2 == 0 else y.reshape(64, 1024)
    elif kind == "add":
        for _ in range(n):
            y = y + 1
    elif kind == "matmul":
        for _ in range(n):
            y = y @ w
    elif kind == "gather_mm":
        rows, zero = idx
        for _ in range(n // 3):
            y = mx.gather_mm(y.reshape(64, 1, 1024), wv, lhs_indices=rows, rhs_indices=zero)
            y = y.reshape(64, 1024)
    else:
        raise ValueError(kind)
    return y


def time_kind(kind: str, n: int, reps: int, dtype: mx.Dtype) -> dict:
    x = mx.random.normal((64, 1024)).astype(dtype) * 1e-3
    w = (mx.random.normal((1024, 1024)) * 1e-3).astype(dtype)
    wv = w.T[None]
    idx = (mx.arange(64, dtype=mx.uint32), mx.zeros(64, dtype=mx.uint32))
    mx.eval(x, w, wv, *idx)
    nodes = n if kind != "gather_mm" else 3 * (n // 3)
    encode, wall = [], []
    for rep in range(reps + 3):  # the first three build the shapes' kernels and graphs
        y = chain(kind, x, w, wv, idx, n)
        t0 = time.perf_counter()
        mx.async_eval(y)
        t1 = time.perf_counter()
        mx.eval(y)
        t2 = time.perf_counter()
        if rep >= 3:
            encode.append((t1 - t0) / nodes * 1e6)
            wall.append((t2 - t0) / nodes * 1e6)
    return {
        "nodes": nodes,
        "encode_us_per_node": float(np.median(encode)),
        "wall_us_per_node": float(np.median(wall)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dtype = getattr(mx, args.dtype)
    out = {"device": str(mx.default_device()), "mlx": mx.__version__, "dtype": args.dtype}
    for kind in ("reshape", "add", "gather_mm", "matmul"):
        out[kind] = time_kind(kind, args.nodes, args.reps, dtype)
        print(kind, out[kind], flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
