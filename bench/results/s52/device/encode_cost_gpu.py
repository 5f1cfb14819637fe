"""Stop 52: what a linear layer costs the host (MLX encoding and launching it) and the device,
by rows of x, on MLX CUDA: one row runs MLX's gemv, 2+ rows cuBLASLt's GEMM (or
workers/skinny_linear.py's kernel). A B = 1 round is bound by such costs (fixed_cost_gpu.py:
a forced 5-token round costs ~1.9 decode steps on both models, while its verify forward alone
costs 1.04 on the 0.87B model).

Per (weight shape, rows M): a graph of `n` independent x @ w.T over distinct weights (a model's
worth), built, then launched with one mx.async_eval (host seconds of that call: encoding and
launches), then waited for (mx.synchronize). Medians over passes.

    python3 bench/results/s52/device/encode_cost_gpu.py --out $OUT/encode_cost_h200.json
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx
import numpy as np

from workers import skinny_linear

SHAPES = {  # the 6.6B preset's weights [N, K] (bench/gpu.py: hidden 4096, 32 layers)
    "q/o [4096, 4096]": (4096, 4096),
    "k/v [2048, 4096]": (2048, 4096),
    "gate/up [12288, 4096]": (12288, 4096),
    "down [4096, 12288]": (4096, 12288),
}


def one(N: int, K: int, M: int, n: int, passes: int, kernel: str) -> dict:
    ws = [mx.random.normal((N, K)).astype(mx.bfloat16) * 0.02 for _ in range(n)]
    x = mx.random.normal((M, K)).astype(mx.bfloat16)
    mx.eval(ws, x)
    host, total = [], []
    for p in range(passes + 1):
        if kernel == "skinny":
            ys = [skinny_linear.matmul(x, w) for w in ws]
        else:
            ys = [x @ w.T for w in ws]
        t0 = time.perf_counter()
        mx.async_eval(ys)
        t1 = time.perf_counter()
        mx.synchronize()
        t2 = time.perf_counter()
        if p:
            host.append((t1 - t0) / n * 1e6)
            total.append((t2 - t0) / n * 1e6)
    del ws
    return {"host_us_per_call": float(np.median(host)), "wall_us_per_call": float(np.median(total))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,2,5,8")
    ap.add_argument("--n", type=int, default=32, help="distinct weights per graph")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for name, (N, K) in SHAPES.items():
        for M in [int(m) for m in args.rows.split(",")]:
            kernels = ["mlx"] + (["skinny"] if M >= 2 else [])
            for kernel in kernels:
                r = {"weight": name, "M": M, "kernel": kernel,
                     **one(N, K, M, args.n, args.passes, kernel)}  # fmt: skip
                r["floor_us"] = N * K * 2 / 4.8e6  # H200 HBM3e, 4.8 TB/s
                rows.append(r)
                print(json.dumps(r), flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": str(mx.default_device()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
