"""Stop 47: one host-head step in C against NumPy, by rows and pairs a row (warm, no engine).

    PYTHONPATH=. python bench/results/s47/native_rows_cpu.py

The default model's head (`HostHead`), a HostCache of 100 prompt pairs a row; then the same
step, REPS times, on each route: `numpy` (HostHead.step without C) and `native` (its C call,
`HostHead.native`, asked directly so the route's row limit does not apply). B rows of W pairs,
with a query at each row's last pair (a drafting step) or none (a prompt's pairs). Prints each
route's median microseconds and the largest difference of their normed outputs; the source of
`host_head.NATIVE_MAX_ROWS`.
"""

from __future__ import annotations

import json
import time

import numpy as np

from workers.default_model import load_default
from workers.mtp.host_head import HostCache, HostHead

REPS = 100
CASES = [(1, 1, True), (1, 6, True), (4, 1, True), (8, 1, True), (16, 1, True), (4, 4, True),
         (8, 4, True), (1, 16, False), (1, 64, False), (4, 64, False)]  # fmt: skip


def main() -> None:
    target, _, _, head = load_default()
    host = HostHead(head, target)
    native = host.native
    assert native is not None, "no C compiler on this machine"
    H = host.embed.shape[1]
    rows = []
    for B, W, query in CASES:
        out = {}
        for route in ("numpy", "native"):
            rng = np.random.default_rng(B * 100 + W)
            host.native = None
            cache = HostCache(B, host.nk, host.d)
            h = rng.normal(size=(B, 100, H)).astype(np.float32)
            host.step(h, rng.integers(0, 2048, size=(B, 100)), cache, None)
            cache.lengths += 100
            hw = rng.normal(size=(B, W, H)).astype(np.float32)
            tw = rng.integers(0, 2048, size=(B, W))
            last = np.full(B, W - 1) if query else None
            if route == "native":
                cache.reserve(W)
                host._tables(int(cache.lengths.max()) + W)
            times = []
            for _ in range(REPS):
                t0 = time.perf_counter()
                if route == "native":
                    _, normed = native(hw, tw, cache, last, host._cos, host._sin)
                else:
                    _, normed = host.step(hw, tw, cache, last)
                times.append(time.perf_counter() - t0)
            out[route] = (float(np.median(times)) * 1e6, normed)
        diff = float(np.abs(out["numpy"][1] - out["native"][1]).max()) if query else 0.0
        rows.append({"B": B, "W": W, "query": query, "numpy_us": round(out["numpy"][0]),
                     "native_us": round(out["native"][0]), "max_diff": diff})  # fmt: skip
    host.native = native
    print(json.dumps({"reps": REPS, "steps": rows}))


if __name__ == "__main__":
    main()
