"""Stop 49 (`pf5`): 12 prefills of 16 held-out prompts (+ one round) in a process of its own:
plain, MTP, plain beside a warmed MTP engine, MTP after mx.clear_cache(); run each in turn.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/prefill_process_cpu.py plain|mtp|plain_polluted|mtp_clear
"""

import os
import sys
import time

import mlx.core as mx

from bench.turns import demo_worker_engine
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts

prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=1)
n = sys.argv[1]
if n == "plain_polluted":
    other = demo_worker_engine("mtp")
    n = "plain"
e = Engine.load(
    None,
    drafter=None if n == "plain" else "mtp",
    max_batch_size=16,
    draft_depth=3,
    adaptive_depth=n != "plain",
    warm_up=True,
    prefix_cache_tokens=-1,
)
if sys.argv[1] == "mtp_clear":
    mx.clear_cache()
e.generate(prompts[:16], sp)
print(
    "cache MB",
    round(mx.get_cache_memory() / 2**20),
    "active MB",
    round(mx.get_active_memory() / 2**20),
    "peak MB",
    round(mx.get_peak_memory() / 2**20),
)
t0 = time.perf_counter()
for _rep in range(12):
    e.prefix_cache.clear()
    e.generate(prompts[:16], sp)
print(sys.argv[1], "s", round(time.perf_counter() - t0, 2), flush=True)
os._exit(0)
