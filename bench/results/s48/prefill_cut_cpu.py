"""A joining prompt's MTP prefill cut at the head's window, or whole, in turns, one process.

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. \
        python bench/results/s48/prefill_cut_cpu.py B REPS MAX_TOKENS > OUT.json

Plain decoding, MTP (adaptive up to 5 at B = 1, 3 above) with every prefill cut at the window
(`cut_at_window`, the threshold set to 0) and MTP with every prefill whole, on the embedded
default model: B held-out prompts a `generate` (B = 1: each prompt alone, 8 of them), the
three in turns (order reversed every other rep). Mean milliseconds a request or a job; every
output must equal plain's.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import workers.prefill_job as pj
from bench.round_split import force_prefill_cut, prefill_class
from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    B, reps, max_tokens = (int(x) for x in sys.argv[1:4])
    prompts = heldout_prompts(8 if B == 1 else B)
    jobs = [[p] for p in prompts] if B == 1 else [prompts]
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    spec = Engine(plain.model, plain.tokenizer,
                  drafter=make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model),
                  max_batch_size=B, draft_depth=5 if B == 1 else 3, adaptive_depth=True,
                  warm_up=True)  # fmt: skip
    sp = SamplingParams(max_tokens=max_tokens)
    pj.CUT_MIN_SKIPPED = 0  # "cut": every prefill that can be cut is
    seconds: dict[str, list[float]] = {"plain": [], "cut": [], "whole": []}
    identical = True
    for e in (plain, spec):
        e.generate(jobs[0], sp)
    for rep in range(reps):
        order = ("plain", "cut", "whole") if rep % 2 == 0 else ("whole", "cut", "plain")
        for job in jobs:
            outs = {}
            for name in order:
                force_prefill_cut(name == "cut")  # plain's rows have no window: never cut
                engine = plain if name == "plain" else spec
                t0 = time.perf_counter()
                outs[name] = [c.tokens for c in engine.generate(job, sp)]
                seconds[name].append(time.perf_counter() - t0)
            identical &= outs["cut"] == outs["plain"] == outs["whole"]
    pj.Prefill = prefill_class()  # type: ignore[misc]
    mean = {k: round(1e3 * float(np.mean(v)), 2) for k, v in seconds.items()}
    print(json.dumps({
        "machine": "2-core AMD EPYC VM, MLX 0.32.4 CPU, fp32, BLIS 1 thread",
        "batch_size": B, "reps": reps, "max_tokens": max_tokens, "jobs_a_rep": len(jobs),
        "mean_ms": mean, "whole_over_cut_time": round(mean["whole"] / mean["cut"], 4),
        "plain_over_cut": round(mean["plain"] / mean["cut"], 4),
        "plain_over_whole": round(mean["plain"] / mean["whole"], 4),
        "outputs_identical": identical,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
