"""Stop 53: one worker's share of the demo's batch job (bench/results/s50/contended_job_cpu.py's
adaptive engine, as a demo worker builds it) with the depth policy's choices traced
(bench.adaptive_trace.trace_choices), then its prices at 16 rows: round costs per depth, the
acceptance, each depth's predicted rate over plain's, the margin drafting must clear, the
warm-up's costs and the live rounds behind each cost. Run two at once (HALF 0 and 1, the same
START_AT) as the demo's two workers contend:

    at=$(python3 -c "import time; print(time.time() + 15)")
    python bench/results/s53/cpu/traced_job_cpu.py 0 $at & python bench/results/s53/cpu/traced_job_cpu.py 1 $at
"""

import json
import sys
import time
from collections import Counter

import numpy as np

from bench.adaptive_trace import trace_choices
from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

half, start_at = int(sys.argv[1]), float(sys.argv[2])
e = EngineSpec(drafter="mtp", config=serving_config(draft_depth=3, max_batch_size=16)).build()
choices = []
trace_choices(e.depth_policy, choices)
prompts = heldout_prompts(64)[half * 32 : (half + 1) * 32]
sp = SamplingParams(max_tokens=64)
while time.time() < start_at:
    time.sleep(0.01)
t0 = time.perf_counter()
for i, p in enumerate(prompts):
    e.add_request(f"r{i}", e.tokenizer.encode(p), sp)
while e.has_work():
    e.step()
wall = time.perf_counter() - t0
c = Counter((ch["B"] >= 16, ch["why"], ch["k"]) for ch in choices)
rates16 = [ch for ch in choices if ch["B"] >= 16 and ch["why"] == "rates"]
pol = e.depth_policy
print(
    json.dumps(
        {
            "wall": wall,
            "counts": {
                f"{'B16' if a else 'B<16'} {w} k{k}": n for (a, w, k), n in sorted(c.items())
            },
            "rates16_sample": rates16[:3] + rates16[-3:],
            "acceptance": [round(float(x), 3) for x in getattr(pol, "acceptance", lambda: [])()]
            if callable(getattr(pol, "acceptance", None))
            else None,
        }
    )
)

costs = pol.round_costs(16)
print(
    json.dumps(
        {
            "half": half,
            "costs16_ms": [round(1e3 * float(x), 2) for x in costs],
            "acc": [round(float(x), 3) for x in pol.acceptance()],
            "rates16_over_k0": [round(float(x / pol._rates(16)[0]), 3) for x in pol._rates(16)],
            "margin16": [round(pol._margin(16, k), 3) for k in range(1, 4)],
            "warm16_ms": {str(k): round(1e3 * v, 2) for (b, k), v in pol._warm.items() if b == 16},
            "live16": {
                str(k): (
                    len(pol._live_costs(16, k)),
                    round(1e3 * float(np.median(pol._live_costs(16, k))), 2)
                    if pol._live_costs(16, k)
                    else None,
                )
                for k in range(4)
            },
        }
    )
)
