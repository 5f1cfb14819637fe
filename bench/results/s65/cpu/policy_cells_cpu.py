"""What the adaptive policy chose and priced in one worker's share of the demo's batch job.

    python bench/results/s65/cpu/policy_cells_cpu.py B MAX_DEPTH

Runs 2B held-out prompts x 64 tokens on an adaptive MTP engine after its warm-up and one pass;
prints the (batch size, depth) choices, the policy's round costs at B, its acceptance, the
warm-up's cells at B = 8 and 16, the live cells and the switch and build costs.
"""

import collections
import sys
import time

from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B = int(sys.argv[1])
maxd = int(sys.argv[2])
plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
e = host_mtp_engine(plain, maxd, True)
pol = e.depth_policy
real = pol.choose
log = collections.Counter()


def choose(b):
    k = real(b)
    log[(b, k)] += 1
    return k


pol.choose = choose
sp = SamplingParams(max_tokens=64)
prompts = heldout_prompts(64)[: 2 * B]
e.generate(prompts[:B], sp)
log.clear()
t0 = time.perf_counter()
e.generate(prompts, sp)
print("s", time.perf_counter() - t0)
print(sorted(log.items()))
print("costs B:", {k: round(v * 1e3, 1) for k, v in zip(range(maxd + 1), pol.round_costs(B))})
print("acc", pol.acceptance())
print("warm", {c: round(t * 1e3, 1) for c, t in sorted(pol._warm.items()) if c[0] in (8, 16)})
print("warm err", {c: round(t, 3) for c, t in sorted(pol._warm_error.items()) if c[0] in (8, 16)})
live = collections.defaultdict(list)
for b, k, t in pol._rows:
    live[(b, k)].append(round(t * 1e3, 1))
print("live", {c: v[-12:] for c, v in sorted(live.items()) if c[0] >= 14})
print(
    "switch",
    [round(x * 1e3, 1) for x in pol._switch],
    "build",
    [round(x * 1e3, 1) for x in pol._build],
)
