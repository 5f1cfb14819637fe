"""Stop 52: workers/attention_cuda.py's ragged window attention by warps per block, against
MLX's masked attention: error against an fp32 reference and device time per call.

Shapes are the 6.6B preset's (32 query heads, 16 KV heads, head dim 128, bf16). Row r's window
query i attends slots [0, lengths[r] + i]; lengths are S - W for row 0 and random below for
the others. Time per call: `n` independent calls in one graph, launched and waited for once,
medians over passes.

    python3 bench/results/s52/device/window_warps_gpu.py --out $OUT/window_warps_h200.json
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx
import numpy as np

from workers import attention_cuda

HQ, HK, D = 32, 16, 128


def reference(q, k, v, lengths, scale):  # fp32, masked
    B, _, W, _ = q.shape
    S = k.shape[2]
    kk = mx.repeat(k.astype(mx.float32), HQ // HK, axis=1)
    vv = mx.repeat(v.astype(mx.float32), HQ // HK, axis=1)
    s = (q.astype(mx.float32) * scale) @ kk.transpose(0, 1, 3, 2)  # [B, HQ, W, S]
    limit = lengths[:, None, None, None] + mx.arange(W)[None, None, :, None]
    s = mx.where(mx.arange(S)[None, None, None, :] <= limit, s, -mx.inf)
    return mx.softmax(s, axis=-1) @ vv


def masked_mlx(q, k, v, lengths, scale):  # what the engine runs without the kernel
    W, S = q.shape[2], k.shape[2]
    limit = lengths[:, None, None, None] + mx.arange(W)[None, None, :, None]
    mask = mx.arange(S)[None, None, None, :] <= limit
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


def per_call_us(fn, args_list, passes: int) -> float:
    times = []
    for p in range(passes + 1):
        outs = [fn(*a) for a in args_list]
        t0 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        if p:
            times.append((time.perf_counter() - t0) / len(args_list) * 1e6)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--slots", default="133,512,1024")
    ap.add_argument("--windows", default="1,2,5,8")
    ap.add_argument("--warps", default="4,8,16,32")
    ap.add_argument("--unrolls", default="1", help="keys each warp loads ahead (the kernel's U)")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    scale = D**-0.5
    rows = []
    for B in [int(x) for x in args.batch_sizes.split(",")]:
        for S in [int(x) for x in args.slots.split(",")]:
            for W in [int(x) for x in args.windows.split(",")]:
                lens = [S - W] + [int(rng.integers(1, S - W + 1)) for _ in range(B - 1)]
                lengths = mx.array(lens, dtype=mx.int32)
                calls = []
                for _ in range(args.n):
                    q = mx.random.normal((B, HQ, W, D)).astype(mx.bfloat16)
                    k = mx.random.normal((B, HK, S, D)).astype(mx.bfloat16)
                    v = mx.random.normal((B, HK, S, D)).astype(mx.bfloat16)
                    calls.append((q, k, v, lengths, scale))
                mx.eval(calls)
                ref = reference(*calls[0])
                row: dict = {"B": B, "slots": S, "W": W}
                row["masked_mlx_us"] = per_call_us(masked_mlx, calls, args.passes)
                err = mx.abs(masked_mlx(*calls[0]).astype(mx.float32) - ref).max().item()
                row["masked_mlx_err"] = err
                for nw in [int(x) for x in args.warps.split(",")]:
                    for u in [int(x) for x in args.unrolls.split(",")]:

                        def kern(q, k, v, lengths, scale, nw=nw, u=u):
                            return attention_cuda.ragged_window_attention(
                                q, k, v, lengths, scale, nw, u
                            )

                        row[f"kernel_{nw}_{u}_us"] = per_call_us(kern, calls, args.passes)
                        out = kern(*calls[0]).astype(mx.float32)
                        row[f"kernel_{nw}_{u}_err"] = mx.abs(out - ref).max().item()
                rows.append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                  for k, v in row.items()}), flush=True)  # fmt: skip
    with open(args.out, "w") as f:
        json.dump({"device": str(mx.default_device()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
