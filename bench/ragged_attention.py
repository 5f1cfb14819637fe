"""The CUDA ragged attention kernel (workers/attention_cuda.py) against MLX's masked attention
on the same keys, values and lengths: largest difference and time per call.

    python -m bench.ragged_attention --out F.json      # MLX CUDA only
    python -m bench.ragged_attention --heads 8,2,64 --contexts 256,512,1024 --windows 4

Each shape's first call is timed too (`*_first_ms`: what MLX CUDA builds for a new shape), and
whether `attention_cuda.serves` routes it to the kernel.

32 query heads, 8 KV heads, head dim 128, bf16 (the 6B preset's attention); rows' lengths
up to 64 below the context; keys and values are 128-slot-rounded views of a longer slot axis,
as the engine's cache hands them over. Times are per call, 32 calls per evaluation (a 32-layer
step's worth).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from workers import attention_cuda
from workers.attention_cuda import ragged_window_attention

HEADS = (32, 8, 128)  # query heads, KV heads, head dim


def masked(q, k, v, mask, scale):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


def per_call_us(fn, reps: int = 50) -> float:
    for _ in range(5):
        mx.eval(fn())
    mx.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            mx.eval(fn())
        best = min(best, (time.perf_counter() - t0) / reps)
    return best / 32 * 1e6


def first_call_ms(fn) -> float:
    """One call at a shape not run before: what MLX CUDA builds for it, and the call."""
    mx.synchronize()
    t0 = time.perf_counter()
    mx.eval(fn())
    return (time.perf_counter() - t0) * 1e3


def one_shape(B: int, W: int, ctx: int, rng: np.random.Generator, heads: tuple = HEADS) -> dict:
    HQ, HK, D = heads
    lens = np.array([ctx - int(rng.integers(0, min(ctx, 64))) for _ in range(B)])
    lengths = mx.array(lens.astype(np.int32))
    need = -(-(int(lens.max()) + W) // 128) * 128
    cap = -(-need // 256) * 256 + 256
    kbuf = mx.random.normal((B, HK, cap, D)).astype(mx.bfloat16)
    vbuf = mx.random.normal((B, HK, cap, D)).astype(mx.bfloat16)
    k, v = kbuf[:, :, :need], vbuf[:, :, :need]
    q = mx.random.normal((B, HQ, W, D)).astype(mx.bfloat16)
    slot = mx.arange(need)[None, None, None, :]
    mask = slot <= (lengths[:, None] + mx.arange(W)[None])[:, None, :, None]
    scale = D**-0.5
    masked_first = first_call_ms(lambda: masked(q, k, v, mask, scale))
    kernel_first = first_call_ms(lambda: ragged_window_attention(q, k, v, lengths, scale))
    ref = masked(q, k, v, mask, scale).astype(mx.float32)
    got = ragged_window_attention(q, k, v, lengths, scale).astype(mx.float32)
    return {
        "slots": need,
        "served_by_kernel": attention_cuda.serves(q, k, None),
        "masked_first_ms": masked_first,
        "kernel_first_ms": kernel_first,
        "max_abs_diff": float(mx.max(mx.abs(ref - got))),
        "masked_us": per_call_us(lambda: [masked(q, k, v, mask, scale) for _ in range(32)]),
        "kernel_us": per_call_us(
            lambda: [ragged_window_attention(q, k, v, lengths, scale) for _ in range(32)]
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/ragged_attention.json")
    ap.add_argument("--heads", default="32,8,128", help="query heads, KV heads, head dim")
    ap.add_argument("--contexts", default="128,1024,4096")
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--windows", default="1,5")
    args = ap.parse_args()
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    heads = tuple(ints(args.heads))
    rng = np.random.default_rng(0)
    res: dict = {"device": str(mx.default_device()), "heads": list(heads), "rows": {}}
    for ctx in ints(args.contexts):
        for B in ints(args.batch_sizes):
            for W in ints(args.windows):
                row = one_shape(B, W, ctx, rng, heads)
                res["rows"][f"ctx={ctx} B={B} W={W}"] = row
                print(f"ctx={ctx} B={B} W={W}", json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
