"""s64: host cost of one custom-kernel call on MLX CUDA, plain and through mx.compile.

    python3 bench/results/s64/device/kernel_call_cost.py --out F.json

For the verify's two custom kernels at 6.6B shapes, B = 1, W = 5 (workers/skinny_linear.py's
[5, 4096] x [4096, 4096], workers/attention_cuda.py's window attention over 256 slots), and MLX's
own matmul for scale: microseconds of Python per call building the lazy array (`build`), and per
node in `mx.async_eval` of 256 such calls (`encode`), each called as is and through a function
`mx.compile` traced once for the shape (a replay reuses the traced primitive). Medians of 7.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from workers import attention_cuda, skinny_linear  # noqa: E402

N = 256


def timed(make, reps: int = 7) -> tuple[float, float]:
    mx.eval(make(0))
    builds, encodes = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        outs = [make(i) for i in range(N)]
        t1 = time.perf_counter()
        mx.async_eval(outs)
        t2 = time.perf_counter()
        mx.eval(outs)
        builds.append((t1 - t0) / N)
        encodes.append((t2 - t1) / N)
    return 1e6 * float(np.median(builds)), 1e6 * float(np.median(encodes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    bf = mx.bfloat16
    xs = [mx.random.normal((5, 4096)).astype(bf) for _ in range(8)]
    w = (mx.random.normal((4096, 4096)) * 0.02).astype(bf)
    q = [mx.random.normal((1, 5, 32, 128)).astype(bf).transpose(0, 2, 1, 3) for _ in range(8)]
    k = mx.random.normal((1, 8, 256, 128)).astype(bf)
    v = mx.random.normal((1, 8, 256, 128)).astype(bf)
    lengths = mx.array([128], mx.int32)
    mx.eval(xs, w, q, k, v, lengths)
    skinny = skinny_linear.matmul
    attn = lambda qq: attention_cuda.ragged_window_attention(qq, k, v, lengths, 0.088)  # noqa: E731
    c_skinny = mx.compile(skinny)
    c_attn = mx.compile(
        lambda qq, kk, vv, ll: attention_cuda.ragged_window_attention(qq, kk, vv, ll, 0.088)
    )
    cases = {
        "matmul x@w.T": lambda i: xs[i % 8] @ w.T,
        "skinny": lambda i: skinny(xs[i % 8], w),
        "skinny compiled": lambda i: c_skinny(xs[i % 8], w),
        "attention": lambda i: attn(q[i % 8]),
        "attention compiled": lambda i: c_attn(q[i % 8], k, v, lengths),
        "add": lambda i: xs[i % 8] + 1,
    }
    rows = []
    for name, make in cases.items():
        build, encode = timed(make)
        rows.append({"case": name, "build_us": build, "encode_us": encode})
        print(f"{name:20s} build {build:6.1f} us  encode {encode:6.1f} us", flush=True)
    same = [
        bool(mx.array_equal(skinny(xs[0], w), c_skinny(xs[0], w)).item()),
        bool(mx.array_equal(attn(q[0]), c_attn(q[0], k, v, lengths)).item()),
    ]
    print("compiled outputs equal:", same)
    Path(args.out).write_text(
        json.dumps(
            {"device": str(mx.default_device()), "rows": rows, "compiled_equal": same}, indent=1
        )
    )


if __name__ == "__main__":
    main()
