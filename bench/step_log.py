"""Each engine step's wall time and what it prefilled, for the bench tools that split a job
step by step (bench/adaptive_trace.py, bench/step_timeline.py, bench/round_split.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from workers import Engine


@dataclass
class Step:
    seconds: float  # the step's wall time
    rows: int  # rows running after it
    prefill_s: float  # of which its prefill (RoundStats.time_prefill_s)
    prefill_tokens: int  # tokens a joining prefill advanced in it (0: none did)


def log_steps(engine: Engine) -> list[Step]:
    """Wrap `engine.step` to append each step's `Step` to the list returned, until
    `del engine.step` (the class's method again)."""
    steps: list[Step] = []
    real = engine.step

    def step() -> list:
        before = len(engine._stats)
        t0 = time.perf_counter()
        events = real()
        seconds = time.perf_counter() - t0
        new = engine._stats[before:]  # the step's own RoundStats
        steps.append(Step(seconds, len(engine.rows), sum(s.time_prefill_s for s in new),
                          sum(s.num_prefill_tokens for s in new)))  # fmt: skip
        return events

    engine.step = step  # type: ignore[method-assign]
    return steps
