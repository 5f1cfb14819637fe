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


def step_classes(steps: list[Step], traced: list[int] | None = None) -> list[str]:
    """Each step's class in a served pass: "join" (a joining prefill started, advanced or
    finished in it), "after_join" (one of the two steps after a join), "trace" (with `traced`,
    its count of the MTP head's new traces per step: a step outside a join that traced), or
    "steady" (bench/results/s61/)."""
    kinds, since = [], 99
    for i, s in enumerate(steps):
        since = 0 if s.prefilled else since + 1
        if s.prefilled:
            kinds.append("join")
        elif traced is not None and traced[i]:
            kinds.append("trace")
        else:
            kinds.append("after_join" if since <= 2 else "steady")
    return kinds


def count_head_traces() -> list[int]:
    """From now on, count the traces the MTP head's compiled step makes (each new shape key is
    an `mx.compile` in workers/compiled_step.py, through that module's own reference, so no
    other compile counts); returns the one-item list the count accumulates in."""
    import mlx.core as mx

    from workers import compiled_step

    made = [0]
    real = mx.compile

    def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        made[0] += 1
        return real(fn, *args, **kwargs)

    compiled_step.mx.compile = counting  # type: ignore[attr-defined]
    return made
