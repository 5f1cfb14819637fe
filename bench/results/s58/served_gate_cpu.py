"""Stop 58: the join gate on served-like traffic on the CPU: an adaptive MTP engine (B = 8, depth
up to 3, warm-up on) decodes 32 held-out prompts (48 tokens +- 50%) three times, with the gate
off (join_wait_steps 0) and on (8); per pass: seconds, joins started, held steps, and the gate's
price and steady step then.

    python bench/results/s58/served_gate_cpu.py > bench/results/s58/served_gate_cpu.txt
"""

import time
from pathlib import Path

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine

model_dir = Path("workers/default_model/target")
prompts = heldout_prompts(model_dir, 32)
sp = spread_params(len(prompts), 48, 0.5)
for wait in (0, 8):
    engine = Engine.load(model_dir, drafter="mtp", max_batch_size=8, draft_depth=3,
                         adaptive_depth=True, warm_up=True, join_wait_steps=wait)  # fmt: skip
    gate, real = engine.join_gate, engine.join_gate.should_join
    calls: list[tuple[bool, bool]] = []  # (joined, anyone ready)

    def should_join(running: int, free: int, waiting: int, real=real, calls=calls) -> bool:
        calls.append((real(running, free, waiting), min(free, waiting) > 0))
        return calls[-1][0]

    gate.should_join = should_join  # type: ignore[method-assign]
    for rep in range(3):
        calls.clear()
        t0 = time.perf_counter()
        engine.generate(prompts, sp)
        secs = time.perf_counter() - t0
        held = sum(1 for joined, ready in calls if ready and not joined)
        steady = gate.steady_s() or 0.0
        print(f"wait {wait} pass {rep}: {secs:.2f} s, joins {sum(j for j, _ in calls)}, "
              f"held {held}, price {gate.price_s() * 1e3:.1f} ms, steady {steady * 1e3:.1f} ms")  # fmt: skip
