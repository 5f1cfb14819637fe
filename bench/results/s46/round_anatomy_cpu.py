"""Stop 46, CPU: where a B = 1 round's time goes, plain and MTP (host head, fixed depth DEPTH).

    PYTHONPATH=. python bench/results/s46/round_anatomy_cpu.py 5

Engine phases wrapped with perf_counter (8 held-out prompts, 64 tokens, one warm pass, then
one timed): `_draft` (the head's steps), `_forward` (building the verify's graph),
`Flight.launch` (mx.async_eval: on the CPU it computes the round while it launches it),
`_collect`, `_admit` (prefill); medians and totals in ms.
"""

import collections
import sys
import time

import numpy as np

import workers.engine as em
from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

T = collections.defaultdict(list)


def wrap(obj, name, key):
    f = getattr(obj, name)

    def g(*a, **k):
        t0 = time.perf_counter()
        r = f(*a, **k)
        T[key].append(time.perf_counter() - t0)
        return r

    setattr(obj, name, g)


depth = int(sys.argv[1])
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
e = host_mtp_engine(plain, depth, adaptive=False)
for eng, tag in [(plain, "plain"), (e, "mtp")]:
    for n in ["_step", "_launch", "_collect", "_draft", "_admit", "_forward"]:
        wrap(eng, n, f"{tag}.{n}")
wrap(em.Flight, "launch", "flight.launch")
wrap(em.Flight, "read_back", "flight.read_back")
prompts = heldout_prompts(8)
p = SamplingParams(max_tokens=64, temperature=0.0)
for eng in (plain, e):
    eng.generate(prompts, p)
T.clear()
for eng, tag in ((plain, "plain"), (e, "mtp")):
    eng.generate(prompts, p)
    for k in list(T):
        if k.startswith("flight"):
            T[tag + "." + k] = T.pop(k)
for k, v in T.items():
    v = np.array(v) * 1e3
    print(f"{k:28s} n={len(v):5d} median {np.median(v):.3f} ms  total {v.sum():.1f} ms")
