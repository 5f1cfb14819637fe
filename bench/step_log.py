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
    prefill_s: float  # of which its prefill (RoundStats.time_prefill_s, where it ended a round)
    # prompt tokens of the rows whose prefill finished in it (RoundStats.num_prefill_tokens):
    # 0 in a step that only advanced a chunk of a longer prefill
    prefill_tokens: int
    prefilled: bool  # a joining prefill started, advanced or finished in it


def log_steps(engine: Engine) -> list[Step]:
    """Wrap `engine.step` to append each step's `Step` to the list returned, until
    `del engine.step` (the class's method again)."""
    steps: list[Step] = []
    real = engine.step

    def step() -> list:
        before, job = len(engine._stats), _prefill_state(engine)
        t0 = time.perf_counter()
        events = real()
        seconds = time.perf_counter() - t0
        new = engine._stats[before:]  # the step's own RoundStats
        tokens = sum(s.num_prefill_tokens for s in new)
        steps.append(Step(seconds, len(engine.rows), sum(s.time_prefill_s for s in new), tokens,
                          bool(tokens) or _prefill_state(engine) != job))  # fmt: skip
        return events

    engine.step = step  # type: ignore[method-assign]
    return steps


def _prefill_state(engine: Engine) -> tuple[object, int]:
    """The engine's prefill job and how far it is (None, 0 when none runs): a step that starts,
    advances or ends one changes it."""
    job = engine._prefill
    return (job, job.done) if job is not None else (None, 0)
