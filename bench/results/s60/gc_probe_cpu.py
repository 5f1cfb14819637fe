"""Stop 60: does Python's garbage collector cost a pass? The default model as a demo worker builds
it with at most BATCH rows, a warm pass, then passes of 2 x BATCH prompts with the collector as
it is and after `gc.freeze()`, in turns, counting collections and their milliseconds by
generation (`gc.callbacks`).

    python bench/results/s60/gc_probe_cpu.py none|mtp BATCH
"""

import gc
import sys
import time

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

drafter = None if sys.argv[1] == "none" else sys.argv[1]
B = int(sys.argv[2])
engine = EngineSpec(drafter=drafter, config=serving_config(draft_depth=3, max_batch_size=B)).build()
prompts = heldout_prompts(64)[: 2 * B]
sp = SamplingParams(max_tokens=64)
counts, millis, started = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]


def on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        counts[info["generation"]] += 1
        millis[info["generation"]] += 1e3 * (time.perf_counter() - started[0])


def one_pass(tag: str) -> float:
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}{i}", engine.tokenizer.encode(p), sp)
    t0 = time.perf_counter()
    while engine.has_work():
        engine.step()
    return time.perf_counter() - t0


one_pass("warm")
print("objects the collector tracks:", len(gc.get_objects()))
gc.callbacks.append(on_gc)
for n, mode in enumerate(("as is", "frozen", "as is", "frozen")):
    gc.freeze() if mode == "frozen" else gc.unfreeze()
    counts[:], millis[:] = [0, 0, 0], [0.0, 0.0, 0.0]
    wall = one_pass(f"p{n}-")
    print(f"{mode}: wall {wall:.3f} s, collections by generation {counts}, "
          f"ms {[round(m, 1) for m in millis]}")  # fmt: skip
