"""Stop 46, CPU: the default model's 70 decoder linears (and the tied lm_head) at W rows.

    PYTHONPATH=. python bench/results/s46/linears_width_cpu.py

Medians of 200 evaluations per W; run with BLIS_NUM_THREADS=1 and 2.
"""

import time

import mlx.core as mx
import numpy as np

from workers.engine import Engine

e = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
m = e.model
lins = []
for layer in m.model.layers:
    a = layer.self_attn
    p = layer.mlp
    lins += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, p.gate_proj, p.up_proj, p.down_proj]
print(type(lins[0]))


def run(W, lm=True):
    x = mx.ones((1, W, 256))
    outs = []
    for lin in lins:
        inp = x if lin.weight.shape[1] == 256 else mx.ones((1, W, lin.weight.shape[1]))
        outs.append(lin(inp))
    if lm:
        outs.append(m.model.embed_tokens.as_linear(x))
    return outs


def t(W, lm, reps=200):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval(run(W, lm))
        ts.append(time.perf_counter() - t0)
    return np.median(ts) * 1e3


for _rep in range(2):
    for W in (1, 2, 4, 6, 8):
        print(W, f"linears {t(W, False):.2f} ms, +lm_head {t(W, True):.2f} ms")
