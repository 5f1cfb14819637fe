"""Stop 54: what computing the MLPs only at a verify window's real positions saves on the CPU.
The embedded default model's forward over a [16, 4] window after 150 cached tokens (mlx-lm's
cache), rows verifying 1-4 positions (44 of the 64 real, as drafts cut at the head's
confidence would leave them), each MLP on the gathered real positions and scattered back, in
turns with the whole window; medians of 15 forwards a side, 8 reps. Checks the real positions'
logits are the same bits both ways.

    python bench/results/s54/cpu/packed_mlp_cpu.py
"""

import time

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from workers import Engine

model = Engine.load().model
MLP = type(model.layers[0].mlp)
whole_mlp = MLP.__call__
real_positions: list = [None]  # [N] flat (row * W + position) indices while packing


def packed_mlp(self, x):  # type: ignore[no-untyped-def]
    idx = real_positions[0]
    if idx is None:
        return whole_mlp(self, x)
    B, W, D = x.shape
    y = whole_mlp(self, x.reshape(B * W, D)[idx])
    out = mx.zeros((B * W, y.shape[-1]), y.dtype)
    out[idx] = y
    return out.reshape(B, W, -1)


MLP.__call__ = packed_mlp
B, W, ctx = 16, 4, 150
counts = np.random.default_rng(0).choice([0, 1, 2, 3], size=B, p=[0.25, 0.25, 0.2, 0.3])
idx = mx.array([r * W + j for r in range(B) for j in range(counts[r] + 1)], dtype=mx.int32)
cache = make_prompt_cache(model)
mx.eval(model(mx.random.randint(1, 2000, (B, ctx)), cache=cache))
window = mx.random.randint(1, 2000, (B, W))


def forward_ms(packed: bool, n: int = 15) -> tuple[float, mx.array]:
    real_positions[0] = idx if packed else None
    times = []
    for _ in range(n):
        for c in cache:
            c.offset = ctx
        t0 = time.perf_counter()
        out = model(window, cache=cache)
        mx.eval(out)
        times.append(time.perf_counter() - t0)
    real_positions[0] = None
    return sorted(times)[n // 2] * 1e3, out.reshape(B * W, -1)[idx]


print(f"real positions: {idx.size} of {B * W}")
for _ in range(8):
    (whole, a), (packed, b) = forward_ms(False), forward_ms(True)
    print(f"whole {whole:.2f} ms  packed {packed:.2f} ms  ratio {packed / whole:.3f}  "
          f"real logits equal: {mx.array_equal(a, b).item()}")  # fmt: skip
