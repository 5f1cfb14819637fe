"""Stop 51: one worker's share of the demo's job (32 held-out prompts, B=16, 64 tokens, EOS
honoured) alone in one process, plain or MTP at a fixed depth (kN), 2 jobs: job seconds, and
for MTP the joiners' head pairs (`add_rows`) and the prompt hidden states (`prompt_hidden`),
each timed from a settled cache to its arrays evaluated (ms, calls; the prompt hidden's time
includes whatever of its prefill was still pending).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s51/join_probe_cpu.py plain|kN
"""

import collections
import json
import sys
import time

import mlx.core as mx

import workers.membership as mem
from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

name = sys.argv[1]
if name == "plain":
    e = EngineSpec(drafter=None, config=serving_config(draft_depth=3, max_batch_size=16)).build()
else:
    e = EngineSpec(
        drafter="mtp",
        config=serving_config(draft_depth=int(name[1:]), max_batch_size=16, adaptive_depth=False),
    ).build()
sec = collections.defaultdict(float)
calls = collections.Counter()


def timed(owner, attr, label):
    real = getattr(owner, attr)

    def w(*a, **k):
        mx.eval(e.cache.state_arrays())
        t0 = time.perf_counter()
        out = real(*a, **k)
        if e.drafter is not None:
            mx.eval(
                e.drafter.cache.state_arrays() if hasattr(e.drafter.cache, "state_arrays") else []
            )
        mx.eval(e.cache.state_arrays())
        sec[label] += time.perf_counter() - t0
        calls[label] += 1
        return out

    setattr(owner, attr, w)


if e.drafter is not None:
    timed(e.drafter, "add_rows", "add_rows")
real_ph = mem.prompt_hidden


def ph(p):
    t0 = time.perf_counter()
    out = real_ph(p)
    mx.eval(out) if out is not None else None
    sec["prompt_hidden"] += time.perf_counter() - t0
    calls["prompt_hidden"] += 1
    return out


mem.prompt_hidden = ph
prompts = heldout_prompts(32)
sp = SamplingParams(max_tokens=64)
for rep in range(2):
    sec.clear()
    calls.clear()
    e.prefix_cache.clear()
    t0 = time.perf_counter()
    e.generate(prompts, sp)
    print(
        json.dumps(
            {
                "name": name,
                "rep": rep,
                "job_s": round(time.perf_counter() - t0, 2),
                **{k: [round(v * 1e3), calls[k]] for k, v in sec.items()},
            }
        ),
        flush=True,
    )
