"""Stop 54: what each draft depth costs at 16 rows on the contended 2-core CPU, as the depth
policy measures a round (its `observe`) and as the engine's step wall reads, against the
warm-up's prices. One worker's engine as a demo worker builds it (MTP head, adaptive up to 3,
warm-up on), 16 held-out prompts (cut to 100 tokens) decoding without stopping, then forced
depths: blocks of 6 rounds per depth (a block's first round, a switch, not counted) and the
depths interleaved round by round, twice each. Run two at once, as the demo's two workers:

    at=$(python3 -c "import time; print(time.time() + 25)")
    python bench/results/s54/cpu/held_depths_cpu.py 0 $at & python bench/results/s54/cpu/held_depths_cpu.py 1 $at

(inter_policy_ms stays empty: the alignment of policy rounds to interleaved steps is off by
one there; the interleaved steps' wall is read instead.)
"""

import json
import sys
import time

import numpy as np

from workers import SamplingParams
from workers.service.engine_spec import EngineSpec, serving_config
from workers.stream_speed import heldout_prompts

half, start_at = int(sys.argv[1]), float(sys.argv[2])
e = EngineSpec(drafter="mtp", config=serving_config(draft_depth=3, max_batch_size=16)).build()
pol = e.depth_policy
warm = {k: round(1e3 * v, 2) for (b, k), v in pol._warm.items() if b == 16}
werr = {k: round(v, 3) for (b, k), v in pol._warm_error.items() if b == 16}
log = []
orig = pol.observe


def obs(counts, acc, t):
    log.append((len(counts), int(np.max(counts, initial=0)), t, time.perf_counter()))
    return orig(counts, acc, t)


pol.observe = obs
while time.time() < start_at:
    time.sleep(0.01)
prompts = heldout_prompts(64)[half * 32 : half * 32 + 16]
sp = SamplingParams(max_tokens=1000, ignore_eos=True)
for i, p in enumerate(prompts):
    e.add_request(f"r{i}", e.tokenizer.encode(p)[:100], sp)
while len(e.rows) < 16 or e.waiting:
    e.step()
for _ in range(3):
    e.step()
plan = []
for _rep in range(2):
    for k in [0, 1, 2, 3]:
        plan += [("held", k)] * 6
    for _ in range(6):
        plan += [("inter", k) for k in [0, 1, 2, 3]]
marks = []
for tag, k in plan:
    pol.forced = k
    n0 = len(log)
    t0 = time.perf_counter()
    e.step()
    marks.append((tag, k, time.perf_counter() - t0))
# the log entry for round N arrives at step N+1: align by order (plan i -> log[start + i])
start = len(log) - len(plan) + 1
res = {"warm16_ms": warm, "warm_err": werr}
for tag in ["held", "inter"]:
    pc, wc = {}, {}
    for i, (tg, k, wall) in enumerate(marks):
        if tg != tag:
            continue
        if tag == "held" and i > 0 and marks[i - 1][1] != k:
            continue  # a block's first round carries the switch
        j = start + i - 1
        if 0 <= j < len(log) and log[j][1] == k:
            pc.setdefault(k, []).append(log[j][2])
        wc.setdefault(k, []).append(wall)
    res[tag + "_policy_ms"] = {
        k: round(1e3 * float(np.median(v)), 2) for k, v in sorted(pc.items())
    }
    res[tag + "_n"] = {k: len(v) for k, v in sorted(pc.items())}
    res[tag + "_stepwall_ms"] = {
        k: round(1e3 * float(np.median(v)), 2) for k, v in sorted(wc.items())
    }
print(json.dumps(res))
