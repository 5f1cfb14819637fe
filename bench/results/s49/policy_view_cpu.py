"""Stop 49: the depth policy's view after a serving warm-up (acceptance prior, costs, rates at
each bucket) and after each of two 32-prompt jobs on one MTP engine (B=16, depth up to 3).
The second job hits the first's prefix cache (same prompts): its speed is not a fresh job's.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/policy_view_cpu.py 2
"""

import sys
import time

import numpy as np

from bench.turns import demo_worker_engine
from workers import SamplingParams
from workers.stream_speed import heldout_prompts

np.set_printoptions(precision=4, suppress=True)


def view(p, B, tag):
    costs = p.round_costs(B)
    rates = p._rates(B)
    print(
        f"[{tag}] B={B} acc={p.acceptance()} costs_ms={costs * 1e3} rates/plain={rates / rates[0]} margin(1)={p._margin(B, 1):.3f} settled_plain={p.settled_plain(B)}"
    )


e = demo_worker_engine("mtp")
p = e.depth_policy
for B in (1, 2, 4, 8, 16):
    view(p, B, "after warm-up")
print("warm cells", {k: round(v * 1e3, 2) for k, v in sorted(p._warm.items())})
prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=64)
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    e.take_round_stats()
    t0 = time.perf_counter()
    outs = e.generate(prompts, sp)
    dt = time.perf_counter() - t0
    stats = e.take_round_stats()
    seq = [(s.batch_size, s.draft_depth) for s in stats if s.batch_size]
    rle = []
    for x in seq:
        if rle and rle[-1][0] == x:
            rle[-1][1] += 1
        else:
            rle.append([x, 1])
    print(
        f"job {rep}: {dt:.2f} s, {sum(len(o.tokens) for o in outs) / dt:.0f} tok/s; rounds (B,depth)xN:",
        " ".join(f"{b}/{k}x{n}" for (b, k), n in rle),
    )
    view(p, 16, f"after job {rep}")
