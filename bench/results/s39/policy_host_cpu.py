"""Host seconds of the depth policy's calls in an adaptive MTP engine (s39, the CPU).

    PYTHONPATH=. python bench/results/s39/policy_host_cpu.py [B]

The default model with its MTP head as a worker runs it (adaptive depth, warm-up), 64
held-out prompts of 48-144 tokens (bench/p5_pairs.py's served traffic), the second pass timed.
Each policy method is wrapped by name and its calls and seconds summed (nested calls count in
both). Run at 3fe9e76 on the 2-core dev VM, BLIS preloaded, one BLAS thread: at B=16, `choose`
took 486 us a call on average (93 ms of an 11.5 s pass), each job-end choice 1.5 ms.
"""

from __future__ import annotations

import sys
import time

from bench.join_split import HostTimer
from bench.p5_pairs import spread_params
from workers import Engine
from workers.depth_policy import DepthPolicy
from workers.stream_speed import heldout_prompts

NAMES = ("choose", "observe", "_drain_choice", "settled_plain", "round_costs", "_margin")


def main() -> None:
    timer = HostTimer()
    for name in NAMES:
        setattr(DepthPolicy, name, timer.wrap(name, getattr(DepthPolicy, name)))
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    engine = Engine.load(None, drafter="mtp", adaptive_depth=True, warm_up=True, max_batch_size=B)
    prompts, sp = heldout_prompts(64), spread_params(64, 96, 0.5)
    engine.generate(prompts, sp)
    timer.seconds.clear()
    timer.calls.clear()
    t = time.perf_counter()
    engine.generate(prompts, sp)
    print(f"B={B} pass {time.perf_counter() - t:.3f} s")
    for name, s in timer.seconds.items():
        n = timer.calls[name]
        print(f"{name:15s} calls {n:5d}  total {s * 1e3:8.1f} ms  per call {s / n * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
