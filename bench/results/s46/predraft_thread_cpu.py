"""Stop 46, CPU: six host-head steps in a Python thread while `mx.async_eval` computes a round.

    PYTHONPATH=. python bench/results/s46/predraft_thread_cpu.py none|thread

MTP at fixed depth 5, B = 1, 8 prompts: with `thread`, each round's launch starts a thread
running six head steps on a scratch cache (the work a draft-ahead would add to every round)
and joins it after; medians of the launch and the whole step.
"""

import collections
import sys
import threading
import time

import numpy as np

import workers.pipeline as pl
from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.mtp.host_head import HostCache
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

mode = sys.argv[1]
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
e = host_mtp_engine(plain, 5, adaptive=False, warm_up=False)
d = e.drafter
scratch = HostCache(1, d.host.nk, d.host.d, 512)
scratch.lengths[:] = 200
x = np.random.default_rng(0).standard_normal((1, 1, 256)).astype(np.float32)


def work():
    chain = x
    tok = np.array([[5]])
    for _ in range(6):
        chain, normed = d.host.step(chain, tok, scratch, np.zeros(1, np.int64))
        tok = d.host.logits(normed[:, 0]).argmax(-1)[:, None]
    scratch.lengths[:] = 200


orig = pl.Flight.launch
T = collections.defaultdict(list)


def launch(self, copies):
    t = None
    if mode == "thread":
        t = threading.Thread(target=work)
        t.start()
    t0 = time.perf_counter()
    r = orig(self, copies)
    T["launch"].append(time.perf_counter() - t0)
    if t is not None:
        t1 = time.perf_counter()
        t.join()
        T["join_wait"].append(time.perf_counter() - t1)
    return r


pl.Flight.launch = launch
f = e._step


def step():
    t0 = time.perf_counter()
    r = f()
    T["step"].append(time.perf_counter() - t0)
    return r


e._step = step
p = SamplingParams(max_tokens=64, temperature=0.0)
prompts = heldout_prompts(8)
e.generate(prompts[:2], p)
T.clear()
e.generate(prompts, p)
for k, v in T.items():
    print(mode, k, len(v), f"median {np.median(v) * 1e3:.3f} ms total {np.sum(v) * 1e3:.0f}")
