"""Stop 42: the single stream with a head, adaptive up to depth 3 / 4 / 5 and fixed depth 4.

    PYTHONPATH=. python bench/results/s42/stream_depths_cpu.py HEAD_DIR PROMPTS REPS

As `workers.stream_speed`: each held-out prompt decoded alone (64 new tokens) by a plain engine
and by each MTP engine in turns, warm; prints each pass's plain time over each engine's.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    head, n, reps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    engines = {"plain": plain}
    for name, k, adaptive in (("ad3", 3, True), ("ad4", 4, True), ("ad5", 5, True),
                              ("fix4", 4, False)):  # fmt: skip
        drafter = make_drafter("mtp", head, plain.model)
        engines[name] = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=1,
                               draft_depth=k, adaptive_depth=adaptive, warm_up=True)  # fmt: skip
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    for engine in engines.values():
        engine.generate(prompts[:1], sp)
    for _ in range(reps):
        wall: dict[str, float] = collections.defaultdict(float)
        for p in prompts:
            for name, engine in engines.items():
                t0 = time.perf_counter()
                engine.generate([p], sp)
                wall[name] += time.perf_counter() - t0
        print({k: round(wall["plain"] / v, 3) for k, v in wall.items() if k != "plain"}, flush=True)


if __name__ == "__main__":
    main()
