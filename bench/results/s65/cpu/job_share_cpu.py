"""One worker's share of the demo's batch job, in one process, engines in turns.

    python bench/results/s65/cpu/job_share_cpu.py B REPS OUT.json   (from the repo root, PYTHONPATH=.)

32 held-out prompts x 64 tokens (the demo's 64 prompts over 2 workers), max batch B, greedy.
Engines: plain; MTP at fixed depth 1, 2, 3 (no policy); MTP adaptive up to depth 3 (the demo's
setting). Each rep runs every engine once, the order rotated by rep; every engine has its
warm-up and one untimed pass first. Writes each engine's job seconds per rep and the ratio of
the medians, plain over engine. Pin it to one core (taskset -c 0) to stand for one of the
demo's two workers on the 2-core VM.
"""

import json
import statistics
import sys
import time

from bench.p5_pairs import rotated
from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B, R, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
engines = {"plain": plain, **{f"fix{k}": host_mtp_engine(plain, k, False) for k in (1, 2, 3)}}
engines["adaptive"] = host_mtp_engine(plain, 3, True)
sp = SamplingParams(max_tokens=64)
prompts = heldout_prompts(64)[: 2 * B]
for e in engines.values():
    e.generate(prompts[:B], sp)
seconds: dict[str, list[float]] = {k: [] for k in engines}
for rep in range(R):
    for k in rotated(list(engines), rep):
        t0 = time.perf_counter()
        engines[k].generate(prompts, sp)
        seconds[k].append(time.perf_counter() - t0)
base = statistics.median(seconds["plain"])
result = {
    "batch_size": B, "prompts": len(prompts), "max_tokens": 64, "reps": R,
    "seconds": seconds,
    "plain_over_engine": {k: base / statistics.median(v) for k, v in seconds.items()},
}  # fmt: skip
json.dump(result, open(out, "w"), indent=1)
for k, v in result["plain_over_engine"].items():
    print(f"{k:9s} {v:.3f}  {[round(x, 2) for x in seconds[k]]}")
