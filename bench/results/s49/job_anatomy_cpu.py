"""Stop 49: where a fresh engine's 32-prompt job (B=16, the demo's per-worker share) spends
its steps, plain against adaptive MTP (depth up to 3), engines fresh each pass, in turns:
seconds and steps per category, and each prefill step's tokens, rows, depth and ms.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/job_anatomy_cpu.py PASSES
"""

import collections
import gc
import sys
import time

from bench.turns import demo_worker_engine
from workers import SamplingParams
from workers.stream_speed import heldout_prompts

prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=64)


def make(n):
    if n == "plain":
        return demo_worker_engine(None)
    return demo_worker_engine("mtp")


agg = {n: collections.defaultdict(list) for n in ("plain", "mtp")}
for rep in range(int(sys.argv[1])):
    for n in ("plain", "mtp") if rep % 2 == 0 else ("mtp", "plain"):
        e = make(n)
        e.take_round_stats()
        for i, p in enumerate(prompts):
            e.add_request(f"r{i}", e.tokenizer.encode(p), sp)
        t_start = time.perf_counter()
        cats = collections.defaultdict(float)
        toks = collections.defaultdict(int)
        n_steps = collections.defaultdict(int)
        pf = []
        while e.has_work():
            t0 = time.perf_counter()
            e.step()
            dt = time.perf_counter() - t0
            st = e.take_round_stats()
            s = st[-1] if st else None
            if s is None:
                cat = "empty"
            elif s.num_prefill_tokens:
                cat = "prefill+round"
                pf.append(
                    (
                        s.num_prefill_tokens,
                        s.batch_size,
                        s.draft_depth,
                        round(dt * 1e3),
                        round(s.time_prefill_s * 1e3),
                    )
                )
            elif s.batch_size >= 14:
                cat = f"B>=14 d{s.draft_depth}"
            else:
                cat = f"B<14 d{s.draft_depth}"
            cats[cat] += dt
            n_steps[cat] += 1
            if s is not None:
                toks[cat] += s.num_generated_tokens if hasattr(s, "num_generated_tokens") else 0
        total = time.perf_counter() - t_start
        agg[n]["total"].append(total)
        for c, v in cats.items():
            agg[n][c].append(v)
            agg[n]["n " + c].append(n_steps[c])
        print(
            rep,
            n,
            round(total, 2),
            {c: (round(v, 2), n_steps[c]) for c, v in sorted(cats.items())},
            flush=True,
        )
        print("   prefill steps (tokens, B, depth, ms, prefill ms):", pf, flush=True)
        del e
        gc.collect()
