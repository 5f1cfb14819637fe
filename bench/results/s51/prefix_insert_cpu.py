"""Stop 51: what the prefix cache's inserts cost in one worker's share of the demo's job (32
held-out prompts, B=16, 64 tokens, a plain engine as a demo worker builds it). Each insert is
timed from a settled cache (the prefill's KV evaluated first, so its compute is not charged to
the insert) to its blocks evaluated: `build` is the host's graph building alone, `total` adds
the copies' evaluation.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s51/prefix_insert_cpu.py LABEL REPS
"""

import json
import sys
import time

import mlx.core as mx

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

label, reps = sys.argv[1], int(sys.argv[2])
engine = EngineSpec(drafter=None, config=serving_config(max_batch_size=16)).build()
pc = engine.prefix_cache
real = pc.insert
acc = {"build_s": 0.0, "total_s": 0.0, "calls": 0, "blocks": 0}


def blocks() -> list[mx.array]:
    return [a for b in pc._lru.values() for a in (*b.keys, *b.values)]


def insert(tokens, cache, row, *rest):  # type: ignore[no-untyped-def]
    mx.eval(cache.state_arrays())
    before = len(pc._lru)
    t0 = time.perf_counter()
    real(tokens, cache, row, *rest)
    t1 = time.perf_counter()
    mx.eval(blocks())
    t2 = time.perf_counter()
    acc["build_s"] += t1 - t0
    acc["total_s"] += t2 - t0
    acc["calls"] += 1
    acc["blocks"] += len(pc._lru) - before


pc.insert = insert  # type: ignore[method-assign]
prompts = heldout_prompts(32)
for rep in range(reps):
    pc.clear()
    acc.update(build_s=0.0, total_s=0.0, calls=0, blocks=0)
    t0 = time.perf_counter()
    engine.generate(prompts, SamplingParams(max_tokens=64))
    job = time.perf_counter() - t0
    row = {"label": label, "rep": rep, "job_s": round(job, 3)}
    row.update({k[:-2] + "_ms": round(v * 1e3, 1) for k, v in acc.items() if k.endswith("_s")})
    row.update(calls=acc["calls"], blocks=acc["blocks"])
    print(json.dumps(row), flush=True)
