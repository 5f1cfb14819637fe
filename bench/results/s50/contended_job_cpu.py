"""Stop 50: one worker's share of the demo's batch job (held-out prompts 32 * HALF onward, 32
of them, B=16, 64 tokens each) on an engine as a demo worker builds it, started at START_AT
(epoch seconds) so that two such processes run at once (contended_ab_cpu.sh). Prints one JSON
line: the job's wall and CPU seconds, its rounds by depth, the engine's load seconds.

    python bench/results/s50/contended_job_cpu.py NAME HALF START_AT
"""

import json
import sys
import time

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

n, half, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t_load = time.perf_counter()
if n == "plain":
    e = EngineSpec(drafter=None, config=serving_config(draft_depth=3, max_batch_size=16)).build()
elif n in ("adaptive", "held0", "hold") or n.startswith("mg"):
    e = EngineSpec(drafter="mtp", config=serving_config(draft_depth=3, max_batch_size=16)).build()
    if n.startswith("mg"):  # stop 63: the policy's min_gain at NN / 100 (mgNN)
        e.depth_policy.min_gain = int(n[2:]) / 100
    if n == "held0":
        e.depth_policy.forced = 0
    if n == "hold":  # stop 59: a drafting depth kept while it pays (MLX CUDA's setting)
        e.depth_policy.hold_depth = True
else:
    e = EngineSpec(
        drafter="mtp",
        config=serving_config(draft_depth=int(n[1:]), max_batch_size=16, adaptive_depth=False),
    ).build()
prompts = heldout_prompts(64)[half * 32 : (half + 1) * 32]
sp = SamplingParams(max_tokens=64)
load_s = time.perf_counter() - t_load
late = time.time() > start_at
while time.time() < start_at:
    time.sleep(0.01)
t0 = time.perf_counter()
c0 = time.process_time()
for i, p in enumerate(prompts):
    e.add_request(f"r{i}", e.tokenizer.encode(p), sp)
dd = {}
steps = []  # (seconds, rows, depth, prefill tokens, host prefill seconds) a step
while e.has_work():
    ts = time.perf_counter()
    e.step()
    dt = time.perf_counter() - ts
    st = e.take_round_stats()
    for s in st:
        dd[s.draft_depth] = dd.get(s.draft_depth, 0) + 1
    s = st[-1] if st else None
    steps.append(
        (
            round(dt, 5),
            s.batch_size if s else 0,
            s.draft_depth if s else -1,
            s.num_prefill_tokens if s else 0,
            round(s.time_prefill_s, 5) if s else 0.0,
        )
    )
print(
    json.dumps(
        {
            "name": n,
            "half": half,
            "wall": time.perf_counter() - t0,
            "cpu": time.process_time() - c0,
            "depths": dd,
            "load_s": load_s,
            "late": late,
            "steps": steps,
        }
    )
)
