"""Stop 49: what a 16-row step's parts cost on the CPU, alone (the default model's shapes):
the 70 decoder linears at 1, 16, 32, 48 rows (all weights of the 10 layers, one evaluation),
and the attention's batched products (MLX loops one BLAS call per row and KV head) at 16
rows x 2 KV heads over 180 slots for 1-12 query rows per head (GQA's 2 query heads x a
window of 1-6). Medians; 20 independent products per evaluation for the attention.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/b16_parts_cpu.py
"""

import time
from typing import Any

import mlx.core as mx
import numpy as np

from workers.engine import Engine

N = 20  # attention products per evaluation: the evaluation's own overhead shared


def median_us(f, reps: int) -> float:  # type: ignore[no-untyped-def]
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval(f())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e6)


model: Any = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False).model
weights = [
    w
    for layer in model.layers
    for w in (
        layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
        layer.self_attn.v_proj.weight, layer.self_attn.o_proj.weight,
        layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight, layer.mlp.down_proj.weight,
    )
]  # fmt: skip
params = sum(w.size for w in weights)
for rows in (1, 16, 32, 48):
    xs = {d: mx.random.normal((rows, d)) for d in (256, 768)}
    mx.eval(list(xs.values()))
    us = median_us(lambda: [xs[w.shape[1]] @ w.T for w in weights], 40)  # noqa: B023
    print(f"linears, {rows} rows: {us / 1e3:.2f} ms, {2 * params * rows / us / 1e3:.1f} GFLOP/s")

S = 180
ks = [mx.random.normal((16, 2, 1, S, 64)) for _ in range(N)]
vs = [mx.random.normal((16, 2, 1, S, 64)) for _ in range(N)]
mx.eval(ks, vs)
for M in (1, 2, 4, 6, 8, 12):
    qs = [mx.random.normal((16, 2, 1, M, 64)) for _ in range(N)]
    ps = [mx.random.normal((16, 2, 1, M, S)) for _ in range(N)]
    mx.eval(qs, ps)
    scores = median_us(lambda: [q @ mx.swapaxes(k, -1, -2) for q, k in zip(qs, ks)], 60) / N  # noqa: B023
    values = median_us(lambda: [p @ v for p, v in zip(ps, vs)], 60) / N  # noqa: B023
    print(f"attention, {M} query rows a KV head: scores {scores:.0f} us, values {values:.0f} us")
