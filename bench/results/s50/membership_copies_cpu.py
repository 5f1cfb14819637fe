"""Stop 50: what a worker's 32-prompt job (B=16, 64 tokens, an engine as a demo worker builds
it) spends in the running cache's membership changes: `BatchCache.keep_rows` (rows leaving)
and `append` (rows joining), and the prefix cache's inserts, each evaluated at once so that
its copy is timed (the evaluations add syncs: an upper bound).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s50/membership_copies_cpu.py plain|kN
"""

import collections
import sys
import time

import mlx.core as mx

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

name = sys.argv[1]
if name == "plain":
    config = serving_config(draft_depth=3, max_batch_size=16)
else:
    config = serving_config(draft_depth=int(name[1:]), max_batch_size=16, adaptive_depth=False)
engine = EngineSpec(drafter=None if name == "plain" else "mtp", config=config).build()
seconds: dict[str, float] = collections.defaultdict(float)
calls: collections.Counter[str] = collections.Counter()


def timed(owner, method: str, state) -> None:  # type: ignore[no-untyped-def]
    real = getattr(owner, method)

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        mx.eval(state())
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        mx.eval(state())
        seconds[method] += time.perf_counter() - t0
        calls[method] += 1
        return out

    setattr(owner, method, wrapper)


timed(engine.cache, "keep_rows", engine.cache.state_arrays)
timed(engine.cache, "append", engine.cache.state_arrays)
timed(engine.prefix_cache, "insert", lambda: [])
t0 = time.perf_counter()
engine.generate(heldout_prompts(32), SamplingParams(max_tokens=64))
job = time.perf_counter() - t0
print(name, f"job {job:.2f} s", {m: (round(s * 1e3), calls[m]) for m, s in seconds.items()})
