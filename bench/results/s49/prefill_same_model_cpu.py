"""Stop 49: Prefill.advance time of 16 held-out prompts (+ one round, untimed) on four engines
in one process, alternating order each pass (10 passes, medians): plain, MTP, a plain engine
on the MTP engine's own model object, and a second plain engine (the noise between two
identical engines).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/prefill_same_model_cpu.py
"""

import statistics
import time

import workers.prefill_job as pj
from bench.turns import demo_worker_engine
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts

prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=1)
acc = {"t": 0.0}
real = pj.Prefill.advance


def timed(self, *a, **k):
    t0 = time.perf_counter()
    r = real(self, *a, **k)
    acc["t"] += time.perf_counter() - t0
    return r


pj.Prefill.advance = timed
mtp = demo_worker_engine("mtp")
engines = {
    "plain": demo_worker_engine(None),
    "mtp": mtp,
    "plain_on_mtp_model": Engine(
        mtp.model, mtp.tokenizer, max_batch_size=16, warm_up=True, prefix_cache_tokens=-1
    ),
    "plain2": demo_worker_engine(None),
}
res = {n: [] for n in engines}
for rep in range(10):
    for n, e in list(engines.items()) if rep % 2 == 0 else list(engines.items())[::-1]:
        e.prefix_cache.clear()
        acc["t"] = 0.0
        e.generate(prompts[:16], sp)
        res[n].append(acc["t"])
for n in res:
    print(n, "advance ms", round(statistics.median(res[n]) * 1e3, 1))
