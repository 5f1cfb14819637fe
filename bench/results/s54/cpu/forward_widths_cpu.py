"""Stop 54: the embedded default model's forward over mlx-lm's own KV cache (150 tokens of
context) on the 2-core CPU (fp32, BLIS, one thread), by rows x window: what a plain step
(B16 L1) and a depth-2 verify (B16 L3) cost on this machine without the engine. Medians of 30.

    python bench/results/s54/cpu/forward_widths_cpu.py
"""

import time

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from workers import Engine


def forward_ms(model, B: int, L: int, ctx: int = 150, n: int = 30) -> float:  # type: ignore[no-untyped-def]
    """Median ms of a [B, L] forward after `ctx` cached tokens (the cache rewound each time)."""
    cache = make_prompt_cache(model)
    mx.eval(model(mx.random.randint(1, 2000, (B, ctx)), cache=cache))
    y = mx.random.randint(1, 2000, (B, L))
    times = []
    for _ in range(n):
        for c in cache:
            c.offset = ctx  # the same shape every time
        t0 = time.perf_counter()
        mx.eval(model(y, cache=cache))
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1e3


if __name__ == "__main__":
    model = Engine.load().model
    for _ in range(2):
        shapes = [(16, 1), (16, 3), (16, 4), (48, 1), (1, 1)]
        print(" | ".join(f"B{B} L{L} {forward_ms(model, B, L):.2f} ms" for B, L in shapes))
