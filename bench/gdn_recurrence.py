"""The fused gated-delta recurrence (workers/gdn_recurrence.py) against mlx-lm's ops loop.

    python -m bench.gdn_recurrence [--out bench/results/gdn_recurrence_<device>.json]

On a GPU: (1) agreement of the fused kernel with mlx-lm's `gated_delta_ops` on random inputs
(bf16 q/k/v, fp32 state, ragged masks, Dk 48 and 128, Hk < Hv); (2) what a window costs:
the ops loop over T positions vs the fused kernel plus its commit rerun, T = 1..5, synced.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.gated_delta import gated_delta_ops

from workers.gdn_recurrence import window_recurrence


def inputs(B: int, T: int, Hk: int, Hv: int, Dk: int, Dv: int, seed: int = 0) -> tuple:
    mx.random.seed(seed)
    q = mx.random.normal((B, T, Hk, Dk)).astype(mx.bfloat16) * 0.1
    k = mx.random.normal((B, T, Hk, Dk))
    k = (k / mx.linalg.norm(k, axis=-1, keepdims=True)).astype(mx.bfloat16)
    v = mx.random.normal((B, T, Hv, Dv)).astype(mx.bfloat16)
    g = mx.random.uniform(0.8, 1.0, (B, T, Hv))
    beta = mx.random.uniform(0.1, 0.9, (B, T, Hv))
    state = mx.random.normal((B, Hv, Dv, Dk)) * 0.1
    lengths = mx.random.randint(0, T + 1, (B,))
    mask = mx.arange(T)[None, :] < lengths[:, None]
    return q, k, v, g, beta, state, mask


def timed(f, reps: int = 50) -> float:
    for _ in range(3):
        mx.eval(f())
    t0 = time.perf_counter()
    for _ in range(reps):
        mx.eval(f())
    return (time.perf_counter() - t0) / reps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    fused = window_recurrence(128)
    device = str(mx.default_device())
    result: dict = {"device": device, "fused": getattr(fused, "__name__", None), "agreement": []}
    if fused is None:
        print("no fused recurrence on this backend: nothing to compare")
        return
    for B, T, Hk, Hv, Dk, Dv in [
        (3, 5, 2, 4, 48, 48),
        (4, 4, 16, 16, 128, 128),
        (2, 17, 4, 8, 64, 32),
    ]:
        x = inputs(B, T, Hk, Hv, Dk, Dv)
        y_ref, s_ref = gated_delta_ops(*x)
        y, s = fused(*x)
        valid = x[-1][..., None, None]
        err_y = mx.abs(mx.where(valid, y.astype(mx.float32) - y_ref.astype(mx.float32), 0)).max()
        err_s = mx.abs(s - s_ref).max()
        row = {"shape": [B, T, Hk, Hv, Dk, Dv], "max_abs_y": err_y.item(), "max_abs_state": err_s.item(),
               "state_scale": mx.abs(s_ref).max().item()}  # fmt: skip
        result["agreement"].append(row)
        print(row, flush=True)
    timing = {}
    for T in range(1, 6):
        x = inputs(8, T, 16, 16, 128, 128)
        n = mx.full((8,), T, dtype=mx.int32)

        def loop(x=x):
            return gated_delta_ops(*x[:-1])

        def two_pass(x=x, n=n, T=T):
            _, final = fused(*x[:-1], None)
            if T == 1:
                return final
            keep = mx.arange(T)[None, :] < n[:, None]
            return fused(*x[:-2], x[-2], keep)[1]

        timing[str(T)] = {
            "ops_loop_ms": round(timed(loop), 3),
            "fused_ms": round(timed(two_pass), 3),
        }
        print(T, timing[str(T)], flush=True)
    result["window_ms_B8_H16_D128"] = timing
    out = args.out or f"bench/results/gdn_recurrence_{device.split('(')[1].split(',')[0]}.json"
    Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
