"""Stop 49: why the adaptive engine drafts on one worker's share of the demo's batch job (32
held-out prompts, B=16, depth up to 3, a fresh demo-worker engine per pass): every drafting
round's batch size, depth and reason (bench.adaptive_trace's `trace_choices`).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/why_draft_cpu.py PASSES
"""

import collections
import sys
import time

from bench.adaptive_trace import trace_choices
from bench.turns import demo_worker_engine
from workers import SamplingParams
from workers.stream_speed import heldout_prompts

prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=64)
for p in range(int(sys.argv[1])):
    engine = demo_worker_engine("mtp")
    assert engine.depth_policy is not None
    choices: list[dict] = []
    trace_choices(engine.depth_policy, choices)
    t0 = time.perf_counter()
    engine.generate(prompts, sp)
    dt = time.perf_counter() - t0
    drafting = [c for c in choices if c["k"] > 0]
    counts = collections.Counter((c["why"], c["B"] >= 14) for c in drafting)
    print(f"pass {p}: {dt:.2f} s, {len(choices)} choices, drafting {len(drafting)}:",
          {f"{w}{' B>=14' if big else ' B<14'}": n for (w, big), n in sorted(counts.items())})  # fmt: skip
    for c in drafting:
        if c["B"] >= 14:
            print(
                "   ",
                {
                    k: v
                    for k, v in c.items()
                    if k in ("round", "B", "k", "why", "gain", "margin", "W", "free")
                },
            )
