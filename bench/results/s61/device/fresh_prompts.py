"""Stop 61: is a pass over prompts the engines have not seen as fast as a repeated one? P5's
passes (bench/p5_pairs.py) repeat one prompt set, so after the first pass every shape the
traffic makes (prefill lengths, batch sizes, attention spans, the MTP head's traces) is
built. join_trace_split.py's first pass after the warm-up ran ~3x slower than later ones
(H200, B = 8, plain and MTP). Here: set A (the first half of the held-out prompts) twice, then
set B (the other half, unseen) twice, then A again; per pass tokens/s, steps, the head's
traces, and the step split as join_trace_split.py makes it.

    python bench/results/s61/device/fresh_prompts.py MODEL_DIR B OUT.json
"""

import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import count_head_traces, log_steps
from workers import Engine

model_dir, B, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
every = heldout_prompts(model_dir, 64)
half = len(every) // 2
sets = {"A": every[:half], "B": every[half:]}
params = {name: spread_params(len(p), 96, 0.5) for name, p in sets.items()}

made = count_head_traces()


def one_pass(engine: Engine, name: str) -> dict:
    steps = log_steps(engine)
    traces = made[0]
    t0 = time.perf_counter()
    outs = engine.generate(sets[name], params[name])
    wall = time.perf_counter() - t0
    del engine.step
    joins = [1e3 * s.seconds for s in steps if s.prefilled]
    other = [1e3 * s.seconds for s in steps if not s.prefilled]
    return {
        "set": name, "tokens_per_s": round(sum(len(o.tokens) for o in outs) / wall, 1),
        "steps": len(steps), "traces": made[0] - traces,
        "join_ms": [len(joins), round(sum(joins), 1), round(statistics.median(joins), 2)],
        "other_ms": [len(other), round(sum(other), 1), round(statistics.median(other), 2)],
        "slow_steps_over_20ms": sum(1 for x in other if x > 20),
    }  # fmt: skip


result: dict = {"B": B, "device": str(mx.default_device()), "mlx": mx.__version__}
for engine_name, kw in (
    ("plain", {}),
    ("mtp", {"drafter": "mtp", "draft_depth": 4, "adaptive_depth": True}),
):
    engine = Engine.load(model_dir, max_batch_size=B, warm_up=True, **kw)
    result[engine_name] = []
    for name in ("A", "A", "B", "B", "A"):
        r = one_pass(engine, name)
        result[engine_name].append(r)
        print(engine_name, json.dumps(r), flush=True)
    out.write_text(json.dumps(result, indent=1))
