"""When waiting requests join a running batch: at once, or a few steps later, several at a time.

A join costs a step more than the prefill's own tokens: a prefill forward of its own, the graph
and the drafter state it builds on the host, and (MLX CUDA) a new batch shape. On a GPU with a
launch-bound model that fixed part is most of a join: an H200 step grew 3.4 -> 6.0 ms with a
join of one or two rows (trained Qwen3.5-shape hybrid, B = 8 / 16, bench/results/s57), and an
MTP job at B = 16 spent 300 of its 881 ms in 35 join steps. Speculation makes that worse: rows
finish a round or two apart at their own acceptance, so 48 joiners came in 35 joins where plain
decoding, whose rows of one length all leave together, made 4 (bench/results/s56).

Joining a little later trades idle slots for fewer joins, a rent-or-buy choice (ski rental): each
step a ready joiner is held, its slot idles and the batch emits that share of a round fewer
tokens (the rent: ready / (running + ready) of a steady step's seconds); a join costs the buy
price, its fixed seconds. The gate holds while the rent paid is below the price, so a held join
costs about twice what joining at once would at most (the classic 2-competitive bound, plus the
last held step's rent), and no joiner
waits more than `max_wait_steps` steps. It holds only while more requests wait than the free
slots take (a queue: a batch job, saturated serving), where a slot freeing next step brings
another row into the same join; a request that fits now joins now. TGI's router makes the same trade with fixed settings
(`waiting_served_ratio`, `max_waiting_tokens`); this one prices it from the engine's own steps.

The price is measured, not set: for each run of steps that prefilled (a join, in one chunk or
several) the seconds it took over that many steady steps, plus the step after it (a pipelined
round launched behind the join pays part of it), against the prompt tokens it prefilled. The
intercept of a robust line through the recent runs is the fixed part; the per-token part
is paid whenever the row joins, so holding cannot save it. Until `min_samples` runs with tokens
that differ are seen, the price is 0 and every join goes at once (the behaviour without a gate).
Off by default (EngineConfig.join_wait_steps = 0) until measured on a GPU. Stop 57's H200
trace (bench/results/s58/join_price_h200.py) shows joins of two rows costing about what joins
of one do (4.5-4.7 against 3.3-4.3 ms over 4 ms steps, trained hybrid, MTP, B = 16): merging
them could save 3-5% of such a job. On the 2-core CPU it gains nothing: a demo worker's job
sees too few joins to price, and served-like traffic at B = 8 made fewer joins (16-20 against
21-26) in no less time (bench/results/s58). Pure Python: the engine feeds it and obeys it.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


@dataclass
class JoinGate:
    max_wait_steps: int  # 0: no gate, every join at once (EngineConfig.join_wait_steps)
    window: int = 32  # recent steady steps and join runs kept
    min_samples: int = 4  # join runs before the price is read from them
    _steady: deque = field(default_factory=deque)  # seconds of recent steps without a prefill
    _runs: deque = field(default_factory=deque)  # (extra seconds, prompt tokens) per join
    _run: list = field(default_factory=list)  # a join run: [seconds, tokens, steps, joins]
    _rent: float = 0.0  # seconds of output the held joiners' idle slots have cost
    _held: int = 0  # steps the ready joiners have been held
    # Ready rows a join left for the next prefill (another length group, workers/prefill_job.py
    # `similar_lengths`; or rows deferred behind a shared uncached prefix or the KV budget) were
    # held already: they follow at once (`follow_up`).
    _open: bool = False

    def __post_init__(self) -> None:
        if self.max_wait_steps < 0:
            raise ValueError(
                f"JoinGate.max_wait_steps={self.max_wait_steps} is invalid: use 0 (off) or more"
            )

    # -- what the engine reports ------------------------------------------------------------------
    def observe_step(
        self, seconds: float, prefilled: bool, prefill_tokens: int, started: int = 0
    ) -> None:
        """One engine step's wall time; `prefilled`: a prefill started, advanced or finished
        in it; `prefill_tokens`: prompt tokens of the rows whose prefill finished in it;
        `started`: prefills (joins) that began in it."""
        if prefilled:
            if not self._run:
                self._run = [0.0, 0, 0, 0]
            self._run[0] += seconds
            self._run[1] += prefill_tokens
            self._run[2] += 1
            self._run[3] += started
            return
        if self._run:  # the step after a join run carries the rest of its cost
            steady = self.steady_s()
            total, tokens, steps, joins = self._run
            self._run = []
            if steady is not None and tokens > 0:
                # Joins back to back (a length group's rest, rows leaving a step apart) are
                # one run: each join is priced at the run's mean, so a run of two is not read
                # as one join with twice the fixed part.
                n = max(1, joins)
                self._push(self._runs, ((total + seconds - (steps + 1) * steady) / n, tokens / n))
            return
        self._push(self._steady, seconds)

    def _push(self, q: deque, item: object) -> None:
        q.append(item)
        if len(q) > self.window:
            q.popleft()

    def steady_s(self) -> float | None:
        """The median seconds of a recent step that prefilled nothing."""
        return statistics.median(self._steady) if self._steady else None

    def price_s(self) -> float:
        """A join's fixed seconds: the intercept of extra seconds against prompt tokens over
        the recent join runs, fitted by Theil-Sen (the median of pairwise slopes, then the
        median intercept), which a few joins that paid a one-off build (70-84 ms against 2-5
        ms joins, H200) cannot drag; 0 until `min_samples` runs with differing tokens."""
        if len(self._runs) < self.min_samples:
            return 0.0
        runs = list(self._runs)
        slopes = [
            (e2 - e1) / (t2 - t1)
            for i, (e1, t1) in enumerate(runs)
            for e2, t2 in runs[i + 1 :]
            if t2 != t1
        ]
        if not slopes:
            return 0.0  # one token count: the fixed part cannot be told from the rest
        slope = max(0.0, statistics.median(slopes))
        return max(0.0, statistics.median(e - slope * t for e, t in runs))

    # -- the choice -------------------------------------------------------------------------------
    def should_join(self, running: int, free: int, waiting: int) -> bool:
        """Whether the waiting rows the `free` slots take start their prefill now, beside
        `running` rows. False holds them one more step, paying that step's rent. Held only
        while more wait than the free slots take: then each step a slot may free, and its row
        shares the join; where every waiting row fits now, holding would only wait for
        arrivals (a served worker's first token would pay for it), so they join at once."""
        ready = min(free, waiting)
        if ready <= 0:
            self._rent, self._held, self._open = 0.0, 0, False
            return False
        if self.max_wait_steps == 0 or self._open or running == 0 or waiting <= free:
            return self._go()
        steady = self.steady_s()
        if steady is None:
            return self._go()
        if self._held >= self.max_wait_steps or self._rent >= self.price_s():
            return self._go()
        self._rent += steady * ready / (running + ready)
        self._held += 1
        return False

    def _go(self) -> bool:
        self._rent, self._held, self._open = 0.0, 0, False
        return True

    def follow_up(self) -> None:
        """The join just started left ready rows behind (another length group, or rows
        `pick_joining` deferred): they start the next prefill without being held again."""
        self._open = True
