"""Stop 63 (GPU): an attention layer's three projections as one matmul over the concatenated
weight [Nq + 2 Nkv, K], against three calls (MLX's gemv / GEMM, or workers/skinny_linear.py's
kernel where the engine routes 2-8 rows), per layer, weights streamed from HBM (queued: 64
layers' calls in one evaluation).

Why: at M = 1 MLX's gemv streams a 6.6B's 32 MiB q weight at ~2.2 TB/s and its 100 MiB MLP
weights at ~3.5 (stop 63's skinny_split run); at M = 5 the q/k/v calls take 24 / 21 / 21 us
(skinny) where one 64 MiB call could stream at the MLP's rate.

    python3 bench/results/s63/device/fused_qkv_gpu.py --out F.json
"""

from __future__ import annotations

import argparse
import json

import mlx.core as mx

from bench.forward_timing import time_queued
from workers import skinny_linear

PRESETS = {"1b": 2048, "6b": 4096}


def layer_weights(H: int, copies: int) -> list[tuple[mx.array, mx.array, mx.array, mx.array]]:
    out = []
    for _ in range(copies):
        wq = (mx.random.normal((H, H)) * 0.02).astype(mx.bfloat16)
        wk = (mx.random.normal((H // 2, H)) * 0.02).astype(mx.bfloat16)
        wv = (mx.random.normal((H // 2, H)) * 0.02).astype(mx.bfloat16)
        out.append((wq, wk, wv, mx.concatenate([wq, wk, wv], axis=0)))
    mx.eval(out)
    return out


def us(fn, x: mx.array, ws: list) -> float:
    """Microseconds a call, 64 calls cycling the weight copies queued in one evaluation."""
    return 1e6 * time_queued(fn, [x], ws, calls=64)


def mm(x, w):
    M = x.shape[0]
    if (
        skinny_linear.ROWS_MIN <= M <= skinny_linear.ROWS_MAX
        and w.nbytes <= skinny_linear.WEIGHT_BYTES_MAX
    ):
        return skinny_linear.matmul(x, w)
    return x @ w.T


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="1,2,5,8,16,40")
    args = ap.parse_args()
    rows = []
    for preset, H in PRESETS.items():
        ws = layer_weights(H, max(2, (160 << 20) // (4 * H * H * 2)))
        for M in [int(m) for m in args.rows.split(",")]:
            x = mx.random.normal((M, H)).astype(mx.bfloat16)
            three = us(lambda x, w: [mm(x, w[0]), mm(x, w[1]), mm(x, w[2])], x, ws)
            three_mlx = us(lambda x, w: [x @ w[0].T, x @ w[1].T, x @ w[2].T], x, ws)
            fused = us(lambda x, w: x @ w[3].T, x, ws)
            fused_split = us(lambda x, w, H=H: mx.split(x @ w[3].T, [H, H + H // 2], -1), x, ws)
            wq, wk, wv, wf = ws[0]
            y = x @ wf.T
            same = [bool(mx.array_equal(y[:, :H], x @ wq.T)),
                    bool(mx.array_equal(y[:, H + H // 2:], x @ wv.T))]  # fmt: skip
            row = {"preset": preset, "M": M, "three_routed_us": three, "three_mlx_us": three_mlx,
                   "fused_us": fused, "fused_split_us": fused_split, "fused_bits_equal_q_v": same}  # fmt: skip
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}),
                  flush=True)  # fmt: skip
            rows.append(row)
        del ws
    with open(args.out, "w") as f:
        json.dump({"device": str(mx.default_device()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
