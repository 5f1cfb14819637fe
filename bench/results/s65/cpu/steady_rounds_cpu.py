"""Steady rounds at B rows, long contexts (prompts of ~120 tokens, then 10 + N steps, no stop).

    python bench/results/s65/cpu/steady_rounds_cpu.py B N MODE [PIPELINE_DEPTH]

MODE: plain; fixK (MTP at fixed depth K, no policy); polK (the adaptive policy forced to K, so
rounds are timed and launched as an adaptive engine runs them); polnwK (the same without the
CPU's wait before a launch of a new shape). Prints ms a step, tokens a row a step, tokens/s.
"""

import sys
import time

from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B, N, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
PD = int(sys.argv[4]) if len(sys.argv) > 4 else 1
plain = Engine.load(
    None, drafter=None, max_batch_size=B, warm_up=mode == "plain", pipeline_depth=PD
)
if mode == "plain":
    e = plain
else:
    kind, k = mode[:-1], int(mode[-1])
    e = host_mtp_engine(plain, max(k, 1), kind.startswith("pol"), pipeline_depth=PD)
    if kind.startswith("pol"):
        e.depth_policy.forced = k
    if kind == "polnw":
        e._wait_before_launch = False
prompts = heldout_prompts(64)[:B]
sp = SamplingParams(max_tokens=100_000)
for i, p in enumerate(prompts):
    e.add_request(f"r{i}", p, sp)
for _ in range(10):
    e.step()
t0 = time.perf_counter()
n = 0
for _ in range(N):
    n += sum(len(o.new_tokens) for o in e.step())
dt = time.perf_counter() - t0
print(
    f"B={B} {mode}: {1e3 * dt / N:.2f} ms a step, {n / N / B:.2f} tokens a row a step, {n / dt:.0f} tokens/s"
)
