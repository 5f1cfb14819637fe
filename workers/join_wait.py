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

from workers.round_costs import median

MIN_STEPS = 4  # steps of each kind before the overhead is trusted (until then: join at once)


@dataclass
class JoinWait:
    enabled: bool = False
    window: int = 32  # recent steps of each kind kept
    _join: deque = field(default_factory=deque)  # join steps' seconds beyond their prefill
    _decode: deque = field(default_factory=deque)  # (seconds, rows) of steps without a join
    _idle: float = 0.0  # seconds of tokens the free slots have lost since the last join

    def overhead(self) -> float:
        """Seconds a join step costs beyond its prefill and a decode step (0 until measured)."""
        if len(self._join) < MIN_STEPS or len(self._decode) < MIN_STEPS:
            return 0.0
        return max(0.0, median(self._join) - median([t for t, _ in self._decode]))

    def may_join(self, running: int, free: int) -> bool:
        """Whether rows may join now: always with nothing running or waiting disabled; else
        once the idle slots' loss reaches one join's overhead."""
        if not self.enabled or running == 0 or free <= 0:
            return True
        return self._idle >= self.overhead()

    def observe(
        self, step_s: float, prefill_s: float, joined: bool, rows: int, idle_slots: int
    ) -> None:
        """One engine step: its seconds, its prefill's, whether rows joined in it, the rows it
        decoded, and the slots left free while rows waited (each lost a row's share)."""
        if joined:
            self._join.append(max(0.0, step_s - prefill_s))
            self._idle = 0.0
        elif prefill_s == 0.0 and rows > 0:
            self._decode.append((step_s, rows))
            if idle_slots > 0:
                self._idle += idle_slots * step_s / rows
        for kept in (self._join, self._decode):
            while len(kept) > self.window:
                kept.popleft()
