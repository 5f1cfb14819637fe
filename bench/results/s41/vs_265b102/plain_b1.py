"""Stop 41: plain decoding at B = 1 on the CPU, for tree-against-tree turns.

    PYTHONPATH=TREE python bench/results/s41/vs_265b102/plain_b1.py

Each of 8 held-out prompts decoded alone (48 tokens) by a plain engine, three times after a
warm-up; prints the median tokens/s.
"""

from __future__ import annotations

import statistics
import time

from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    engine = Engine.load(None, drafter=None, max_batch_size=1)
    prompts, sp = heldout_prompts(8), SamplingParams(max_tokens=48)
    engine.generate(prompts[:2], sp)
    rates = []
    for _ in range(3):
        t0, tokens = time.perf_counter(), 0
        for prompt in prompts:
            tokens += len(engine.generate([prompt], sp)[0].tokens)
        rates.append(tokens / (time.perf_counter() - t0))
    print(round(statistics.median(rates), 1))


if __name__ == "__main__":
    main()
