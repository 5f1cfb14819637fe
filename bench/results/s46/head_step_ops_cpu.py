"""Stop 46, CPU: one host-head step at B = 1 (150 cached entries), warm, and its parts.

    PYTHONPATH=. python bench/results/s46/head_step_ops_cpu.py

Microseconds per call over 2,000 calls each (weights hot in cache: in a round the target's
forward evicts them, and the engine's chained steps measure ~0.37 ms).
"""

import time

import numpy as np

from workers.engine import Engine
from workers.mtp.host_head import HostCache, HostHead

plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
head = Engine.load(None, drafter="mtp", max_batch_size=1).drafter.head
hh = HostHead(head, plain.model)
cache = HostCache(1, hh.nk, hh.d, 256)
cache.lengths[:] = 150
rng = np.random.default_rng(0)
cache.k[:] = rng.standard_normal(cache.k.shape).astype(np.float32)
cache.v[:] = cache.k
hidden = rng.standard_normal((1, 1, 256)).astype(np.float32)
tokens = np.array([[5]])
last = np.zeros(1, dtype=np.int64)


def bench(f, n=2000):
    for _ in range(50):
        f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6


print("step", bench(lambda: hh.step(hidden, tokens, cache, last)))
_, normed = hh.step(hidden, tokens, cache, last)
print("logits", bench(lambda: hh.logits(normed[:, 0])))
print("argmax", bench(lambda: hh.logits(normed[:, 0]).argmax(axis=-1)))
x = rng.standard_normal((1, 1, 256)).astype(np.float32)
print("norm", bench(lambda: hh._norm(x, "ln1")))
print("fc", bench(lambda: hh.fc(np.concatenate([x, x], axis=-1))))
print("concat", bench(lambda: np.concatenate([x, x], axis=-1)))
print("gate_up", bench(lambda: hh.gate_up(x)))
g = rng.standard_normal((1, 1, 768)).astype(np.float32)
print("down", bench(lambda: hh.down(g)))
print("silu", bench(lambda: g * (0.5 + 0.5 * np.tanh(0.5 * g)) * g))
print("q_proj", bench(lambda: hh.q_proj(x)))
print("kv_proj", bench(lambda: hh.kv_proj(x)))
q = rng.standard_normal((1, 1, 4, 64)).astype(np.float32)
pos = np.array([[150]])
print("rope", bench(lambda: hh._rope(q, pos)))
print("attention", bench(lambda: hh._attention(q, np.array([150]), cache)))
k = rng.standard_normal((1, 1, 2, 64)).astype(np.float32)
print("cache.write", bench(lambda: cache.write(k, k)))
print("embed", bench(lambda: hh.embed[tokens]))
