"""Stop 46, CPU: adaptive MTP at B = 8 with depth-policy variants, against plain.

    PYTHONPATH=. python bench/results/s46/b8_policy_cpu.py 8 32 2

bench/turns.py: plain, the policy as is, forced to depth 0, without exploration, and with
min_gain 0.20, in turns (adaptive up to depth 3).
"""

import contextlib
import json
import sys

from bench.turns import host_mtp_engines, in_turns
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B = int(sys.argv[1])
n = int(sys.argv[2])
reps = int(sys.argv[3])
names = ["as_is", "forced0", "no_explore", "gain20"]
engines = host_mtp_engines(B, 3, True, {k: contextlib.nullcontext for k in names})
engines["forced0"].depth_policy.forced = 0
engines["no_explore"].depth_policy.explore_every = 0
engines["gain20"].depth_policy.min_gain = 0.20
prompts = heldout_prompts(n)
groups = [prompts[i : i + B] for i in range(0, n, B)]
p = SamplingParams(max_tokens=64, temperature=0.0)
print(json.dumps(in_turns(engines, groups, p, reps)))
