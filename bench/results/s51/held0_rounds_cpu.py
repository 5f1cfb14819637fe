"""Stop 51: what a depth-0 round costs in an MTP engine against a plain engine, in one process
(engines built as a demo worker builds them, jobs in turns): one worker's share of the demo's
job (32 held-out prompts, B=16, 64 tokens); per job the median step of 14+ rows that ran a
depth-0 round and admitted nothing, and the job's seconds.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s51/held0_rounds_cpu.py REPS
"""

import json
import statistics
import sys
import time

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

reps = int(sys.argv[1])
engines = {
    "plain": EngineSpec(drafter=None, config=serving_config(draft_depth=3, max_batch_size=16)),
    "held0": EngineSpec(drafter="mtp", config=serving_config(draft_depth=3, max_batch_size=16)),
}
built = {name: spec.build() for name, spec in engines.items()}
built["held0"].depth_policy.forced = 0
prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=64)


def job(e) -> dict:  # type: ignore[no-untyped-def]
    for i, p in enumerate(prompts):
        e.add_request(f"r{i}", e.tokenizer.encode(p), sp)
    steps = []
    t0 = time.perf_counter()
    while e.has_work():
        ts = time.perf_counter()
        e.step()
        dt = time.perf_counter() - ts
        st = e.take_round_stats()
        if (
            st
            and st[-1].batch_size >= 14
            and st[-1].draft_depth == 0
            and not any(s.num_prefill_tokens for s in st)
        ):
            steps.append(dt)
    return {
        "job_s": round(time.perf_counter() - t0, 3),
        "d0_ms": round(1e3 * statistics.median(steps), 2),
        "n": len(steps),
    }


for rep in range(reps):
    for name in ("plain", "held0") if rep % 2 == 0 else ("held0", "plain"):
        print(json.dumps({"rep": rep, "name": name, **job(built[name])}), flush=True)
