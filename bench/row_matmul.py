"""GPU experiment: a few rows times a small weight as one gemv per row (`mx.gather_mm`) against
MLX's matmul, which takes cuBLAS from 2 rows on.

    python -m bench.row_matmul [--out FILE]

On MLX CUDA a matmul of 1 row is MLX's own gemv kernel, of 2 or more rows a cuBLASLt GEMM whose
launch costs the host ~11 us (bench/dispatch_cost.py, H200) against ~2-3 us for a kernel of
MLX's. A small model's rounds are bound by the host (bench/round_split.py), so a verify window
of 4 tokens pays that on every linear layer while a decode step does not. `gather_mm` with
every row pointing at the same matrix runs MLX's gather_mv: the gemv kernel once per row, one
launch. Each row then reads the whole weight, which is cheap only while the weight is small
(in L2), so this measures, per weight shape and row count: host launch time and device time of
both forms, and whether each row's result equals the 1-row matmul's bit for bit (the decode
step's numbers).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.dispatch_cost import phase_times

# (name, N, K): the trained hybrid peer's linear layers (hidden 384), and two of a ~1B Qwen3's.
SHAPES = [
    ("hybrid qkv", 768, 384), ("hybrid out / fc", 384, 768), ("hybrid mlp up", 1024, 384),
    ("hybrid mlp down", 384, 1024), ("hybrid lm_head", 2048, 384),
    ("1b q/o", 2048, 2048), ("1b mlp up", 6144, 2048),
]  # fmt: skip
ROWS = [1, 2, 4, 8, 16, 32, 64]


def row_matmul(x: mx.array, weight: mx.array, rows: mx.array, zero: mx.array) -> mx.array:
    """x [M, K] @ weight.T as M gemvs: [M, N]."""
    M, K = x.shape
    y = mx.gather_mm(x.reshape(M, 1, K), weight.T[None], lhs_indices=rows, rhs_indices=zero)
    return y.reshape(M, -1)


def timed(calls: Callable[[], list[mx.array]], reps: int = 20) -> tuple[float, float]:
    """(host launch us, launch + device us) per call, medians over reps of a batch of calls."""
    t = phase_times(calls, reps, warm=3)
    n = len(calls())
    return 1e6 * t["launch"] / n, 1e6 * (t["launch"] + t["wait"]) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50, help="calls per timed batch")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dtype = mx.bfloat16 if mx.default_device() == mx.gpu else mx.float32
    rng = np.random.default_rng(0)
    rows_out = []
    for name, N, K in SHAPES:
        # Distinct weights per call, as a model's layers are (none stays hot by reuse alone).
        weights = [mx.array(rng.standard_normal((N, K)).astype(np.float32) / K**0.5).astype(dtype)
                   for _ in range(args.calls)]  # fmt: skip
        mx.eval(weights)
        for M in ROWS:
            x = mx.array(rng.standard_normal((M, K)).astype(np.float32)).astype(dtype)
            rows, zero = mx.arange(M, dtype=mx.uint32), mx.zeros((M,), dtype=mx.uint32)
            mx.eval(x, rows, zero)
            mm = timed(lambda x=x, ws=weights: [x @ w.T for w in ws])
            gm = timed(lambda x=x, ws=weights, r=rows, z=zero: [row_matmul(x, w, r, z) for w in ws])
            w = weights[0]
            by_rows = row_matmul(x, w, rows, zero)
            one_row = mx.concatenate([x[i : i + 1] @ w.T for i in range(M)])
            r = {
                "shape": name, "N": N, "K": K, "M": M,
                "matmul_launch_us": mm[0], "matmul_total_us": mm[1],
                "rows_launch_us": gm[0], "rows_total_us": gm[1],
                "rows_equal_1row_matmul": bool(mx.array_equal(by_rows, one_row).item()),
                "matmul_equal_1row_matmul": bool(mx.array_equal(x @ w.T, one_row).item()),
            }  # fmt: skip
            rows_out.append(r)
            print(f"{name:16s} M={M:2d}: matmul {mm[0]:5.1f}/{mm[1]:6.1f} us, rows "
                  f"{gm[0]:5.1f}/{gm[1]:6.1f} us (launch/total); rows == 1-row: "
                  f"{r['rows_equal_1row_matmul']}, matmul == 1-row: "
                  f"{r['matmul_equal_1row_matmul']}", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"device": str(mx.default_device()), "mlx": mx.__version__,
                                        "dtype": str(dtype), "rows": rows_out}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
