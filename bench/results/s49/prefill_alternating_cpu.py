"""Stop 49 (`pf4`): Prefill.advance time of 16 held-out prompts on plain and MTP engines in one
process, alternating order each pass (10 passes, medians).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/prefill_alternating_cpu.py plain,mtp3,mtp3_nowait,mtp_fixed3
"""

import statistics
import sys
import time

import workers.prefill_job as pj
from bench.turns import demo_worker_engine
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts

prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=1)
acc = {"t": 0.0, "n": 0}
real = pj.Prefill.advance


def timed(self, *a, **k):
    t0 = time.perf_counter()
    r = real(self, *a, **k)
    acc["t"] += time.perf_counter() - t0
    acc["n"] += 1
    return r


pj.Prefill.advance = timed


def mk(n):
    if n == "plain":
        return demo_worker_engine(None)
    if n == "mtp_fixed3":
        return Engine.load(
            None,
            drafter="mtp",
            max_batch_size=16,
            draft_depth=3,
            warm_up=True,
            prefix_cache_tokens=-1,
        )
    e = demo_worker_engine("mtp")
    if n == "mtp3_nowait":
        e._wait_before_launch = False
    return e


names = sys.argv[1].split(",")
engines = {n: mk(n) for n in names}
res = {n: [] for n in engines}
for rep in range(10):
    for n, e in list(engines.items()) if rep % 2 == 0 else list(engines.items())[::-1]:
        e.prefix_cache.clear()
        acc["t"] = 0.0
        acc["n"] = 0
        e.generate(prompts[:16], sp)
        res[n].append(acc["t"])
for n in res:
    print(n, "advance ms", round(statistics.median(res[n]) * 1e3, 1), "calls", acc["n"])
