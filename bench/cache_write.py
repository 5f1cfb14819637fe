"""GPU: what writing a window into the ragged cache costs, per form (a verify's extra cost).

    python -m bench.cache_write --out F.json

The engine writes each window's keys and values [B, H, W, D] at each row's own slots with
`put_along_axis` (workers/kv_layers._write). Here, for 64 caches (K and V of 32 layers) of
[B, 16, S, 128] bf16, one forward's writes are timed as they run in a forward: each write's
result is read (a slice, summed) so the graph keeps it, all 64 evaluated together. Forms:
`put_along_axis` (the engine's), `slice_update` (one dynamic start, lone row only), `where`
(a mask over the slot axis). Medians of interleaved passes; prints us per write.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

H, D, LAYERS = 16, 128, 64


def put(stored: mx.array, new: mx.array, lengths: mx.array) -> mx.array:
    W = new.shape[2]
    slots = (lengths[:, None] + mx.arange(W)[None])[:, None, :, None]
    return mx.put_along_axis(stored, mx.broadcast_to(slots, new.shape), new, axis=2)


def slice_update(stored: mx.array, new: mx.array, lengths: mx.array) -> mx.array:
    return mx.slice_update(stored, new, lengths[:1], axes=(2,))


def where(stored: mx.array, new: mx.array, lengths: mx.array) -> mx.array:
    B, _, S, _ = stored.shape
    W = new.shape[2]
    idx = mx.arange(S)[None, :] - lengths[:, None]  # [B, S]: slot j holds window token idx
    inside = (idx >= 0) & (idx < W)
    src = mx.take_along_axis(new, mx.clip(idx, 0, W - 1)[:, None, :, None], axis=2)
    return mx.where(inside[:, None, :, None], src, stored)


FORMS = {"put_along_axis": put, "slice_update": slice_update, "where": where}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/cache_write.json")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for B in (1, 8):
        for S in (256, 1024):
            caches = [mx.zeros((B, H, S, D), mx.bfloat16) for _ in range(LAYERS)]
            lengths = mx.array(np.arange(B, dtype=np.int32) * 3 + S // 2 - 8)
            mx.eval(caches, lengths)
            for W in (1, 5):
                new = mx.random.normal((B, H, W, D)).astype(mx.bfloat16)
                mx.eval(new)
                times: dict[str, list[float]] = {}
                for rep in range(args.repeats + 1):
                    for name, fn in FORMS.items():
                        if name == "slice_update" and B > 1:
                            continue
                        t0 = time.perf_counter()
                        for _ in range(5):
                            caches = [fn(c, new, lengths) for c in caches]
                            mx.eval([c[:, :, : S // 2 + W].sum() for c in caches])
                        if rep:
                            times.setdefault(name, []).append(
                                (time.perf_counter() - t0) / (5 * LAYERS)
                            )
                row = {"B": B, "S": S, "W": W}
                row.update({k: 1e6 * float(np.median(v)) for k, v in times.items()})
                rows.append(row)
                print(f"B={B} S={S} W={W}: " + "  ".join(
                    f"{k} {row[k]:6.1f} us" for k in times), flush=True)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": str(mx.default_device()), "rows": rows}))


if __name__ == "__main__":
    main()
