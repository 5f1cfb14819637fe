"""Stop 45: one host head step (and its logits) by batch size, HostLinear's products against
the products as the head made them before (`x @ w_io`: B gemvs for a [B, 1, in] input, a
GEMM that packs the lm_head for the [B, H] logits).

    PYTHONPATH=. python bench/results/s45/host_step_cpu.py

The default model's head on the host (`Engine.load(drafter="mtp")` on the CPU), a cache of
180 entries a row, blocks of 100 steps (20 at W = 64) in turns, 7 blocks, the first dropped;
medians in microseconds.
"""

from __future__ import annotations

import json
import time

import numpy as np

from bench.results.s45.host_linear_cpu import products_as_before
from workers.engine import Engine
from workers.mtp.host_head import HostCache, HostHead


def block(h: HostHead, B: int, W: int, n: int) -> float:
    cache = HostCache(B, h.nk, h.d, 512)
    cache.lengths[:] = 180
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((B, W, 256)).astype(np.float32)
    tokens = rng.integers(0, 2000, (B, W))
    last = np.full(B, W - 1)
    t0 = time.perf_counter()
    for _ in range(n):
        _, normed = h.step(hidden, tokens, cache, last)
        h.logits(normed[:, 0])
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    drafter = Engine.load(None, drafter="mtp", max_batch_size=1).drafter
    host: HostHead = drafter.host  # type: ignore[union-attr]
    rows = []
    for B, W in ((1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (8, 3), (1, 64)):
        n = 100 if W < 64 else 20
        times: dict[str, list[float]] = {"new": [], "old": []}
        for _ in range(7):
            times["new"].append(block(host, B, W, n))
            with products_as_before():
                times["old"].append(block(host, B, W, n))
        med = {k: float(np.median(v[1:])) for k, v in times.items()}
        rows.append({"B": B, "W": W, "new_us": round(med["new"]), "old_us": round(med["old"]),
                     "new_over_old": round(med["new"] / med["old"], 3)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
