"""Stop 43: one NumPy head step (workers/mtp/host_head.py) of the default model, B = 1, over a
head cache of 100 entries (a window of W pairs, read at its last): with its weights warm, and after a 40 MB read (as a verify of the
default model's 34 MB of fp32 weights leaves the caches), median of 200 steps.

    PYTHONPATH=. python bench/results/s43/host_step_cpu.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from workers.engine import Engine
from workers.mtp.host_head import HostCache, HostHead


def main() -> None:
    drafter = Engine.load(None, drafter="mtp", max_batch_size=1).drafter
    host = HostHead(drafter.head, drafter.target)  # type: ignore[union-attr]
    cache = HostCache(1, host.nk, host.d)
    H = host.w_fc.shape[1]
    host.step(
        np.random.randn(1, 100, H).astype(np.float32), np.zeros((1, 100), np.int64), cache, None
    )
    cache.lengths += 100
    big = np.random.randn(40 * 2**20 // 4).astype(np.float32)
    for W in (1, 4):
        x, tok = np.random.randn(1, W, H).astype(np.float32), np.arange(W)[None]
        for evict in (False, True):
            times = []
            for _ in range(200):
                if evict:
                    big.sum()
                t0 = time.perf_counter()
                _, normed = host.step(x, tok, cache, np.array([W - 1]))
                host.logits(normed[:, 0])
                times.append(time.perf_counter() - t0)
            state = "after a 40 MB read" if evict else "warm"
            print(f"W={W} {state}: {1e3 * statistics.median(times):.3f} ms (step + logits)")


if __name__ == "__main__":
    main()
