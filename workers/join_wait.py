"""When waiting rows join a running batch: at once, or once the slots left idle have cost what a
join costs beyond its prefill (ski rental), so one join serves the rows of several finishes.

A join step costs more than a decode step beyond the prefill itself (the new rows' round is a
new shape, the batch settles, the drafter takes the rows in). On an H200 an MTP engine's join
steps cost 17-22 ms against 11-12 ms for plain decoding's (trained hybrid, B=16,
bench/results/s38). Where rows finish together (plain decoding of equal max_tokens) one join
refills the batch; where they finish apart (speculation: each row accepts at its own rate)
each finish is a join of its own, and a closed batch of 64 prompts ran at 0.70-0.81x plain at
B=16 (bench/results/s39). Waiting trades idle slots for fewer joins: each step a free slot
stays empty loses a row's share of the step's tokens. Rent (idle slots) until what they
have lost equals the purchase (one join's overhead), then buy (join): never more than twice
the better of the two in hindsight, and a lone joiner waits at most about one join's
overhead's worth of idle slots. Where joins cost no more than their prefill (the CPU, compute
bound), the overhead measures ~0 and rows join at once. Pure Python: the engine feeds it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from workers.round_costs import fit_linear, median

MIN_STEPS = 4  # steps of each kind before the overhead is trusted (until then: join at once)


@dataclass
class JoinWait:
    enabled: bool = False
    window: int = 32  # recent steps of each kind kept
    _join: deque = field(default_factory=deque)  # (prompt tokens joined, seconds) of join steps
    _decode: deque = field(default_factory=deque)  # seconds of steps without a prefill
    _idle: float = 0.0  # seconds of tokens the free slots have lost since the last join

    def overhead(self) -> float:
        """Seconds a join step costs beyond a decode step whatever it prefills: the intercept
        of join steps' seconds over their prompt tokens, less a decode step's median (0 until
        measured). A GPU prefills a few rows in about the time of one (H200: 16 rows' 9 ms
        join steps in plain decoding, MTP's 15 ms for one or two); a CPU's prefill is compute
        bound, its cost proportional to the tokens: no fixed part, no wait."""
        if len(self._join) < MIN_STEPS or len(self._decode) < MIN_STEPS:
            return 0.0
        tokens = np.array([n for n, _ in self._join], dtype=np.float64)
        seconds = np.array([t for _, t in self._join])
        if np.ptp(tokens) == 0:
            fixed = float(np.median(seconds))  # one size only: no slope to tell apart
        else:
            features = np.stack([np.ones_like(tokens), tokens], axis=1)
            fixed = float(fit_linear(features, seconds)[0])
        return max(0.0, fixed - median(self._decode))

    def may_join(self, running: int, free: int) -> bool:
        """Whether rows may join now: always with nothing running or waiting disabled; else
        once the idle slots' loss reaches one join's overhead."""
        if not self.enabled or running == 0 or free <= 0:
            return True
        return self._idle >= self.overhead()

    def observe(self, step_s: float, prefill_s: float, tokens_joined: int, rows: int,
                idle_slots: int) -> None:  # fmt: skip
        """One engine step: its seconds, its prefill's, the prompt tokens of rows that joined
        in it, the rows it decoded, and the slots left free while rows waited (each lost a
        row's share of the step's tokens)."""
        if tokens_joined:
            self._join.append((tokens_joined, step_s))
            self._idle = 0.0
        elif prefill_s == 0.0 and rows > 0:  # (a chunk of a long prompt: neither)
            self._decode.append(step_s)
            if idle_slots > 0:
                self._idle += idle_slots * step_s / rows
        for kept in (self._join, self._decode):
            while len(kept) > self.window:
                kept.popleft()
