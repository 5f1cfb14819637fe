"""The demo's single stream (8 held-out prompts x 64 tokens, each alone), engines in turns.

    python bench/results/s65/cpu/stream_depths_cpu.py REPS

Engines: plain; MTP at fixed depth 2..5; MTP adaptive up to 5 (the demo's setting). Prints
plain's median seconds over each engine's, and the depths the adaptive policy chose.
"""

import collections
import statistics
import sys
import time

from bench.p5_pairs import rotated
from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

R = int(sys.argv[1])
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
engines = {"plain": plain, **{f"fix{k}": host_mtp_engine(plain, k, False) for k in (2, 3, 4, 5)}}
engines["adaptive"] = host_mtp_engine(plain, 5, True)
policy = engines["adaptive"].depth_policy
chosen: collections.Counter[int] = collections.Counter()
real_choose = policy.choose


def counted_choose(batch_size: int) -> int:
    k = real_choose(batch_size)
    chosen[k] += 1
    return k


policy.choose = counted_choose
sp = SamplingParams(max_tokens=64)
prompts = heldout_prompts(8)
for e in engines.values():
    e.generate(prompts[:1], sp)
chosen.clear()
seconds: dict[str, list[float]] = {k: [] for k in engines}
for rep in range(R):
    for k in rotated(list(engines), rep):
        total = 0.0
        for p in prompts:
            t0 = time.perf_counter()
            engines[k].generate([p], sp)
            total += time.perf_counter() - t0
        seconds[k].append(total)
base = statistics.median(seconds["plain"])
for k, v in seconds.items():
    print(f"{k:9s} {base / statistics.median(v):.3f}", [round(x, 2) for x in v])
print("adaptive depths chosen:", sorted(chosen.items()))
