"""The host head's drafts filled in after the verify's graph is built, or drafted first, in turns.

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. \
        python bench/results/s48/defer_drafts_cpu.py B REPS [MAX_TOKENS] > OUT.json

Plain decoding and two MTP engines (the host head; adaptive depth up to 5 at B = 1, 3 above)
on the embedded default model, one with `Engine.defer_drafts` (the default on the CPU) and one
without, the three in turns in one process (order reversed every other rep): B = 1 decodes the
8 held-out prompts one at a time (the demo's single stream), larger B the first B prompts as one
job. Prints each engine's tokens per second, plain's time over each MTP engine's, and whether
every output equals plain's.
"""

from __future__ import annotations

import json
import sys
import time

from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    B, reps = int(sys.argv[1]), int(sys.argv[2])
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    prompts = heldout_prompts(8 if B == 1 else B)
    jobs = [[p] for p in prompts] if B == 1 else [prompts]
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    engines = {"plain": plain}
    for name, defer in (("deferred", True), ("drafts_first", False)):
        e = Engine(plain.model, plain.tokenizer,
                   drafter=make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model),
                   max_batch_size=B, draft_depth=5 if B == 1 else 3, adaptive_depth=True,
                   warm_up=True)  # fmt: skip
        e.defer_drafts = defer
        engines[name] = e
    sp = SamplingParams(max_tokens=max_tokens)
    seconds = {k: 0.0 for k in engines}
    tokens = {k: 0 for k in engines}
    per_rep: list[dict] = []
    identical = True
    for e in engines.values():
        e.generate(jobs[0], sp)
    for rep in range(reps):
        order = list(engines) if rep % 2 == 0 else list(reversed(engines))
        rep_s = {k: 0.0 for k in engines}
        for job in jobs:
            outs = {}
            for name in order:
                t0 = time.perf_counter()
                outs[name] = [c.tokens for c in engines[name].generate(job, sp)]
                dt = time.perf_counter() - t0
                seconds[name] += dt
                rep_s[name] += dt
                tokens[name] += sum(len(t) for t in outs[name])
            identical &= outs["deferred"] == outs["plain"] == outs["drafts_first"]
        per_rep.append({k: round(rep_s["plain"] / rep_s[k], 4) for k in engines if k != "plain"})
    rate = {k: round(tokens[k] / seconds[k], 2) for k in engines}
    print(json.dumps({
        "machine": "2-core AMD EPYC VM, MLX 0.32.4 CPU, fp32, BLIS 1 thread",
        "batch_size": B, "reps": reps, "max_tokens": max_tokens, "jobs_a_rep": len(jobs),
        "tokens_per_s": rate,
        "plain_time_over": {k: round(seconds["plain"] / seconds[k], 4) for k in engines
                            if k != "plain"},
        "per_rep_plain_time_over": per_rep, "outputs_identical": identical,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
