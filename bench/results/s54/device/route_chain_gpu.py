"""Stop 54 on the GPU: where stop 53's window kernel beats MLX's masked attention, to re-time
workers/attention_cuda.py's routing (WIDE_MAX_SLOTS, WIDE_LONG_SLOTS, WIDE_MAX_READS: set for
stop 52's form of the kernel, which re-read each key once per window query).

    python3 bench/results/s54/device/route_chain_gpu.py [--heads 32,8,128] [--out F]

Per shape (rows B, slots S, window W): a chain of `--chain` calls, each call's output the next
call's queries (so they run one after another, as a forward's layers do), evaluated once;
seconds per call, median of `--passes` after an untimed pass, kernel and masked path in turns
(which goes first alternates by shape). Masked: what the route's fallback runs, mlx-lm's
`scaled_dot_product_attention` on the cache's boolean [B, 1, W, S] mask. Rows are ragged:
row 0 fills the slots, the others a random share of them.
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx
import numpy as np

from workers import attention_cuda


def chain_us(fn, q, n: int, passes: int) -> float:
    times = []
    for p in range(passes + 1):
        x = q
        for _ in range(n):
            x = fn(x)
        t0 = time.perf_counter()
        mx.eval(x)
        mx.synchronize()
        if p:
            times.append((time.perf_counter() - t0) / n * 1e6)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="32,8,128", help="query heads, KV heads, head dim")
    ap.add_argument("--batch-sizes", default="1,4,8,16,32")
    ap.add_argument("--slots", default="128,256,512,1024,2048")
    ap.add_argument("--windows", default="3,5")
    ap.add_argument("--chain", type=int, default=32)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    HQ, HK, D = (int(x) for x in args.heads.split(","))
    rng = np.random.default_rng(0)
    scale = D**-0.5
    rows = []
    for B in (int(b) for b in args.batch_sizes.split(",")):
        for S in (int(s) for s in args.slots.split(",")):
            for W in (int(w) for w in args.windows.split(",")):
                lens = [S - W] + [int(rng.integers(1, S - W + 1)) for _ in range(B - 1)]
                lengths = mx.array(lens, dtype=mx.int32)
                q = mx.random.normal((B, W, HQ, D)).astype(mx.bfloat16).transpose(0, 2, 1, 3)
                k, v = (mx.random.normal((B, HK, S, D)).astype(mx.bfloat16) for _ in range(2))
                pos = (lengths[:, None] + mx.arange(W)[None])[:, None, :, None]
                mask = mx.arange(S)[None, None, None, :] <= pos  # [B, 1, W, S]
                mx.eval(q, k, v, lengths, mask)

                def kernel(x, k=k, v=v, lengths=lengths):
                    return attention_cuda.ragged_window_attention(x, k, v, lengths, scale)

                def masked(x, k=k, v=v, mask=mask):
                    return mx.fast.scaled_dot_product_attention(x, k, v, scale=scale, mask=mask)

                err = mx.abs(kernel(q).astype(mx.float32) - masked(q).astype(mx.float32)).max()
                forms = [("kernel", kernel), ("masked", masked)]
                if len(rows) % 2:
                    forms.reverse()
                us = {name: chain_us(f, q, args.chain, args.passes) for name, f in forms}
                row = {
                    "B": B, "S": S, "W": W, "reads_M": B * HQ * W * S * D / 2**20,
                    "kernel_us": round(us["kernel"], 2), "masked_us": round(us["masked"], 2),
                    "kernel_over_masked": round(us["kernel"] / us["masked"], 3),
                    "routed_now": attention_cuda.serves(q, k, None), "max_diff": err.item(),
                    "kernel_first": forms[0][0] == "kernel",
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": str(mx.default_device()), "heads": args.heads, "rows": rows}, f)


if __name__ == "__main__":
    main()
