"""Stop 63 (GPU): an MLP's gate and up projections as one matmul over their stacked weight
[2 I, H], against two calls, per layer (queued, weights streamed from HBM), as
fused_qkv_gpu.py measured attention's q, k, v.

    python3 bench/results/s63/device/fused_mlp_gpu.py --out F.json
"""

from __future__ import annotations

import argparse
import json

import mlx.core as mx

from bench.forward_timing import time_queued

PRESETS = {"1b": 2048, "6b": 4096}  # hidden; intermediate 3x (bench/gpu.py's Qwen3 shapes)


def us(fn, x: mx.array, ws: list) -> float:
    """Microseconds a call, 32 calls cycling the weight copies queued in one evaluation."""
    return 1e6 * time_queued(fn, [x], ws, calls=32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="1,5,8,40")
    args = ap.parse_args()
    rows = []
    for preset, H in PRESETS.items():
        ws = []
        for _ in range(max(2, (256 << 20) // (2 * 3 * H * H * 2))):
            wg = (mx.random.normal((3 * H, H)) * 0.02).astype(mx.bfloat16)
            wu = (mx.random.normal((3 * H, H)) * 0.02).astype(mx.bfloat16)
            ws.append((wg, wu, mx.concatenate([wg, wu])))
            mx.eval(ws[-1])
        for M in [int(m) for m in args.rows.split(",")]:
            x = mx.random.normal((M, H)).astype(mx.bfloat16)
            two = us(lambda x, w: [x @ w[0].T, x @ w[1].T], x, ws)
            stacked = us(lambda x, w: mx.split(x @ w[2].T, 2, -1), x, ws)
            act_two = us(lambda x, w: (x @ w[0].T) * (x @ w[1].T), x, ws)
            act_stacked = us(lambda x, w: (lambda g, u: g * u)(*mx.split(x @ w[2].T, 2, -1)), x, ws)
            row = {"preset": preset, "M": M, "two_us": two, "stacked_split_us": stacked,
                   "two_times_us": act_two, "stacked_times_us": act_stacked}  # fmt: skip
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}),
                  flush=True)  # fmt: skip
            rows.append(row)
        del ws
    with open(args.out, "w") as f:
        json.dump({"device": str(mx.default_device()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
