"""Stop 46, CPU: what a verify window of 6 tokens costs over a 1-token step, by part.

    PYTHONPATH=. python bench/results/s46/verify_width_cpu.py

The default model (with the engine's CPU routes) over mlx-lm's KV cache at 170 tokens of
context, W = 1 and 6, medians of 150 forwards x 3: as is, SwiGLU without its sigmoid, attention
without its softmax, both, and attention as plain ops. Attribution only (the variants compute
other numbers).
"""

import time

import mlx.core as mx
import mlx_lm.models.qwen3 as q3
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from workers.engine import Engine

e = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
m = e.model
orig_swiglu = q3.swiglu
orig_sdpa = q3.scaled_dot_product_attention


def sdpa_nosoftmax(queries, keys, values, cache, scale, mask, sinks=None):
    B, Hq, L, D = queries.shape
    Hk = keys.shape[1]
    q = (queries * scale).reshape(B, Hk, Hq // Hk, L, D)
    s = q @ mx.expand_dims(keys, 2).swapaxes(-1, -2)
    return (s @ mx.expand_dims(values, 2)).reshape(B, Hq, L, D)


def sdpa_ops(queries, keys, values, cache, scale, mask, sinks=None):
    B, Hq, L, D = queries.shape
    Hk = keys.shape[1]
    q = (queries * scale).reshape(B, Hk, Hq // Hk, L, D)
    s = q @ mx.expand_dims(keys, 2).swapaxes(-1, -2)
    if isinstance(mask, mx.array):
        s = mx.where(mask, s, -1e30)
    elif mask == "causal" and L > 1:
        S = keys.shape[2]
        keep = mx.arange(S)[None] <= (mx.arange(L)[:, None] + S - L)
        s = mx.where(keep, s, -1e30)
    p = mx.softmax(s, axis=-1, precise=True)
    return (p @ mx.expand_dims(values, 2)).reshape(B, Hq, L, D)


cache = make_prompt_cache(m)
prompt = mx.array(np.random.randint(1, 2000, (1, 170)))
mx.eval(m(prompt, cache=cache))


def t(W, reps=150):
    x = mx.array(np.random.randint(1, 2000, (1, W)))
    ts = []
    for _i in range(reps):
        t0 = time.perf_counter()
        y = m(x, cache=cache)
        mx.eval(y)
        ts.append(time.perf_counter() - t0)
        for c in cache:
            c.trim(W)
    return np.median(ts) * 1e3


variants = {
    "base": (orig_swiglu, orig_sdpa),
    "no_silu": (lambda g, x: g * x, orig_sdpa),
    "sdpa_ops": (orig_swiglu, sdpa_ops),
    "no_softmax": (orig_swiglu, sdpa_nosoftmax),
    "neither": (lambda g, x: g * x, sdpa_nosoftmax),
}
res = {k: {1: [], 6: []} for k in variants}
for _rep in range(3):
    for k, (sw, sd) in variants.items():
        q3.swiglu, q3.scaled_dot_product_attention = sw, sd
        for W in (1, 6):
            res[k][W].append(t(W))
for k in variants:
    a, b = np.median(res[k][1]), np.median(res[k][6])
    print(f"{k:10s} W=1 {a:.2f}  W=6 {b:.2f}  delta {b - a:.2f} ms")
