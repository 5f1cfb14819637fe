"""Stop 46, CPU: single-stream MTP ÷ plain with each prompt in its own generate() call against
four prompts queued in one (both at B = 1), in turns.

    PYTHONPATH=. python bench/results/s46/stream_modes_cpu.py
"""

import collections
import time

from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
e = host_mtp_engine(plain, 5, adaptive=False)
prompts = heldout_prompts(16)
p = SamplingParams(max_tokens=64, temperature=0.0)
for eng in (plain, e):
    eng.generate(prompts[:2], p)
T = collections.defaultdict(float)
for _rep in range(3):
    for mode in ("single", "queued"):
        for i in range(0, 16, 4):
            for eng, tag in [(plain, "plain"), (e, "mtp")]:
                t0 = time.perf_counter()
                if mode == "single":
                    for pr in prompts[i : i + 4]:
                        eng.generate([pr], p)
                else:
                    eng.generate(prompts[i : i + 4], p)
                T[mode, tag] += time.perf_counter() - t0
for mode in ("single", "queued"):
    print(
        mode,
        round(T[mode, "plain"], 2),
        round(T[mode, "mtp"], 2),
        "ratio",
        round(T[mode, "plain"] / T[mode, "mtp"], 3),
    )
