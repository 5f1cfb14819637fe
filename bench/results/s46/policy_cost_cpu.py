"""Stop 46, CPU: the depth policy's host time at B = 8 (adaptive up to 3, 32 prompts in groups).

PYTHONPATH=. python bench/results/s46/policy_cost_cpu.py 8 32
"""

import collections
import contextlib
import sys
import time

import workers.drafting as dr
from bench.turns import host_mtp_engines
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B = int(sys.argv[1])
n = int(sys.argv[2])
engines = host_mtp_engines(B, 3, True, {"as_is": contextlib.nullcontext})
e = engines["as_is"]
T = collections.defaultdict(float)
N = collections.Counter()


def wrap(obj, name, key):
    f = getattr(obj, name)

    def g(*a, **k):
        t0 = time.perf_counter()
        r = f(*a, **k)
        T[key] += time.perf_counter() - t0
        N[key] += 1
        return r

    setattr(obj, name, g)


pol = e.depth_policy
for nm in ("choose", "observe", "settled_plain", "job_view"):
    if hasattr(pol, nm) and callable(getattr(pol, nm)):
        wrap(pol, nm, "policy." + nm)
wrap(e, "_step", "engine._step")
wrap(dr, "joining_tail", "joining_tail")
prompts = heldout_prompts(n)
p = SamplingParams(max_tokens=64, temperature=0.0)
e.generate(prompts[:B], p)
T.clear()
N.clear()
for i in range(0, n, B):
    e.generate(prompts[i : i + B], p)
for k in sorted(T):
    print(
        f"{k:24s} calls {N[k]:5d} total {T[k] * 1e3:8.1f} ms  per call {T[k] / N[k] * 1e3:.3f} ms"
    )
