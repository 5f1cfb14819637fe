"""Adaptive draft depth: draft as deep as pays, measured on this machine, this model, this batch.

Speculation trades extra verify width (and draft steps) for fewer rounds. Whether that pays
depends on where the target forward sits: memory-bound (a big model on a GPU, small batches:
a 5-token verify costs about a 1-token decode) or compute-bound (a CPU, or large batches: the
verify costs nearly 5x). A fixed depth is right for one of them and slower than no drafter in
the other. This policy picks, before every round, the depth k that maximises expected tokens
per second for the running batch of B rows:

    rate(k) = B * (1 + sum_{i=1..k} prod_{j<=i} c_j) / time(B, k)

c_j is the acceptance at draft position j given that position j-1 was accepted. time(B, k) is
the engine step's measured wall time (prefill excluded) at that batch size and depth
(workers/round_costs.py): the median of the recent rounds of that (B, k) (the first round of
every shape is dropped: it pays one-time costs such as a GPU backend building kernels for the
new shape, ~40 ms each on MLX CUDA), else a least-squares fit over those medians. Whole-step time,
not per-phase time: what a depth costs includes its bookkeeping, which a per-phase model
misattributes. Drafting is chosen only for a predicted gain above `min_gain` over depth 0: on
a thin margin the policy decodes plainly, which cannot lose.

Never slower than not drafting, and cheap to learn. Each bucket of batch sizes (1, 2-3, 4-7,
8-15, ...) has its own warm-up: depth 0 first, then depths 1, 2, ... in turn (two rounds each),
stopping as soon as no deeper depth could pay (bounds in `_deeper_cannot_pay`), then depth 0
twice more (its first rounds are a process's coldest): a draft model
that costs more than it saves is measured for one or two rounds of depth 1, not for every depth,
and so is an MTP head on a compute-bound batch (2-core CPU, B=16: depth 1 costs 1.75x a plain
round there, so depths 2 and 3 cannot pay at the 0.73 acceptance measured; probing them cost the
demo's short batch job ~4%).
Depths never measured are costed at least as much as the deepest measured one below them, so an
extrapolation cannot pick them. Later, every `explore_every`-th round tries a depth in turn
(so a bad early estimate cannot lock the choice in), but only while what exploring has cost
(its predicted time over the best depth's for the same tokens) stays within `explore_budget`
of all the time observed; an exploration is also charged what it makes the backend do, measured
here: the build of a (batch, depth) shape never run (a shape's first round over its second) and
two switches of depth (MLX CUDA builds a graph per shape: ~15-30 ms each on an H200). Where every
drafting round is the deepest round's graph (`extremes_only`, MLX CUDA) only 0 and max are used.
Near a job's end (no arrivals lately, few waiting) tokens per second no longer decide: the batch drains
and its slowest rows set its time, so the policy then picks the depth that finishes the
running and waiting rows soonest (`job_view`, workers/drain.py). On MLX CUDA, depths are
explored in runs of `run` rounds, rounds that paid a compile are set aside (`one_off_max`), and
neither live probes nor the job-end rule run (`live_probes`, `job_end`): each is a run of graph
switches there.
A serving engine runs every bucket's warm-up before traffic, on synthetic prompts
(workers/warm_up.py, `end_warm_up`); live costs are then read against it scaled by the drift of
plain rounds since (`_cells`), and a predicted gain must also clear the medians' error
(`_margin`). Pure numpy: the engine feeds it and obeys it. Its prices are
workers/round_pricing.py's, its measurements workers/round_log.py's, its warm-up probe and
exploration budget workers/depth_probe.py's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from workers.depth_probe import BucketProbe
from workers.drain import DrainingRows, JobCosts, job_depth
from workers.round_costs import cell_medians
from workers.round_log import RoundLog
from workers.round_pricing import RoundPricing


@dataclass
class DepthPolicy(RoundLog, RoundPricing, BucketProbe):
    max_depth: int
    window: int = 256  # rounds kept for the time estimates
    explore_every: int = 16  # every n-th round drafts an exploration depth
    decay: float = 0.995  # per-round forgetting of acceptance counts
    refresh_every: int = 8  # rounds a choice is reused for the same B (a fit costs ~0.3 ms)
    # Draft only for a predicted gain over depth 0 above this: the prediction's error. On the
    # demo's contended 2-core CPU it put depth 1 at B=16 8% ahead of plain where whole jobs
    # measured no gain (MTP held at depth 0: 5.27-5.40 s, adaptive: 5.29-5.44 s); drafting that pays gains
    # far more (+35% and up at B=1 on the CPU, +20-60% at B=8-32 on a GPU).
    min_gain: float = 0.10
    # Standard errors of the compared cost medians a predicted gain must clear (`_margin`).
    error_sigmas: float = 2.0
    explore_budget: float = 0.01  # exploration may lose at most this share of the time observed
    # A draft forward's time over a target forward's (measured by the engine, when it can): at
    # 1 or more, k draft steps plus the verify cost at least k + 1 decode steps, so drafting
    # can never pay. Past `hopeless_ratio` (margin for timing noise: a draft model the size of
    # the target measures about 1) the policy stays at depth 0 without probing or exploring;
    # below it, the warm-up's probe decides.
    draft_cost_ratio: float | None = None
    hopeless_ratio: float = 1.5
    # A round dearer than `one_off_factor` times the most a depth-k round can cost (a verify of
    # k + 1 tokens, at most k + 1 plain rounds, and k draft steps, each under hopeless_ratio of
    # one) paid a one-time cost, not its shape's: MLX CUDA compiling kernels and head traces for
    # a new span takes seconds (H200, trained hybrid, B=1: the probe's two depth-3 rounds took
    # 1.7 and 2.4 s against 2.5 ms plain rounds, and the policy then never drafted where depth
    # 3 ran 1.41x plain). Such rounds set no cost; their shape is measured again, at most
    # `one_off_max` times per shape, after which its rounds count as they come. 0 (the default,
    # where nothing compiles per shape): every round counts, so a drafter that is simply slow
    # (no cost ratio known up front) is not probed again.
    one_off_factor: float = 8.0
    one_off_max: int = 0
    # Where one-offs are set aside (one_off_max > 0), a round also is one if it costs more
    # than `spike_factor` times the median of its depth's rounds at this batch size or a
    # larger one (a round of fewer rows costs no more), unless the round before it at this
    # shape was one too (a cost that stays is the shape's). MLX CUDA builds attention for
    # each new span a window reads (50-100 ms against 4-7 ms rounds, H200, trained hybrid,
    # B=8): counted, they put a draining batch's small shapes at 30-60 ms a drafting round
    # and the second wave of every 16-prompt job decoded plainly. A shape stays dear until
    # one of its rounds costs as it did before.
    spike_factor: float = 4.0
    # Row-rounds that tried a draft position before the warm-up trusts its measured acceptance
    # to stop early (`_deeper_cannot_pay`); fewer: it assumes every draft would be accepted.
    min_evidence: int = 16
    # Where every drafting round is the deepest round's graph (MLX CUDA: drafts padded to the
    # deepest a row may draft at the batch size, workers/drafting.py), depths between 0 and max
    # cost what max costs and draft less: only 0 and max are probed, explored and chosen, and
    # every drafting round is measured as max (workers/round_log.py).
    extremes_only: bool = False
    # No round costs more than one of more rows or more drafts measured (workers/round_costs.py
    # `cost_table`): where each new shape is a build (MLX CUDA) a draining batch's sizes
    # otherwise read their builds and few rounds.
    cap_by_larger: bool = False
    # Rounds a depth is held when probed or explored. Above 1 (MLX CUDA), a run's first round
    # carries the switch (the other depth's pipelined tail, a graph rebuild) and sets no cost:
    # on an H200 every depth-3 round explored alone among plain ones cost 8.6-11.8 ms at B=8,
    # where depth 3 held costs 4.6 ms against 2.5 ms plain, so drafting was never chosen.
    run: int = 1
    # A bucket's probe ends with plain rounds again (`_probe`): a fresh process's first rounds
    # read plain dearer than it is. Off (`bench.p5_pairs --ab-policy no_rerun`) where that
    # coldness is gone before traffic and each return to plain is a graph switch (MLX CUDA
    # after `build_shapes`); on until a device run measures it (stop 59, H200: level).
    probe_rerun: bool = True
    # Whether buckets are probed on traffic (`_probe`) and the job-end rule below applies. Both
    # off where a change of depth rebuilds the round's graph (MLX CUDA): each probe and each
    # drain choice of plain is a run of switches there. Off together (`bench.p5_pairs
    # --ab-policy lean`), the policy read MTP ÷ plain 1.25-1.28 / 1.37-1.38 / 1.55 / 1.54 at
    # B = 16 / 8 / 4 / 1, against 1.14-1.19 / 1.28-1.32 / 1.48 / 1.54 with them, in five runs
    # of 6-10 pairs (trained hybrid, H200, served traffic, cap 4; bench/results/s59). As the
    # default (stop 60) most of that gain did not hold: 1.50 / 1.41 / 1.33 / 1.20 at B = 1 / 4
    # / 8 / 16 against 1.38 / 1.32 / 1.18 for the policy with both (`probing`, B = 4 / 8 /
    # 16): level within the card's spread (pair by pair a coin toss), no median below it.
    # Kept: by design fewer switches and less host work (not measured). Without live probes a
    # bucket's `settled_plain` answers from the prices it has (fits, larger sizes' cells).
    live_probes: bool = True
    job_end: bool = True
    # The running rows and those still to join them when the job's end is in sight, built
    # when asked (the engine's `_job_view`; None: requests keep arriving, or many wait). A
    # choice made afresh asks, and then picks the depth that finishes them all soonest
    # (workers/drain.py), each row's own acceptance shrunk by `drain_prior` draft tokens to
    # what finished rows spread. Asked only then: a view costs O(B + W) rows' reads.
    job_view: Callable[[], DrainingRows | None] | None = None
    drain_prior: float = 24.0  # eight depth-3 rounds: two unlucky ones do not stop drafting
    # Where a change of depth rebuilds the round's graph (MLX CUDA): a drafting depth held
    # (`_held`) is kept while its predicted rate is no lower than plain's (`min_gain` and the
    # error margin guard the start of drafting only), and other depths are explored from it
    # only where that could change the choice (`_could_change`). There, rounds next to a switch
    # read 18-25 ms against 2-4 ms (the head's catch-up, a graph rebuild: H200, trained hybrid,
    # B=16) and are set aside as spikes, so the switches the policy charges stay ~1 ms; each
    # plain exploration and each choice of plain at a thin predicted gain cost far more. On
    # served traffic at B=16 the policy read 0.96-1.01x plain without this and 1.18x with it,
    # fixed depth 3 1.19-1.24x (B=8: 1.22 and 1.32, fixed 1.30; bench/results/s39, tree
    # 47a4f2c; one later machine start read 1.03 at B=16, pairs 0.95-1.14). Elsewhere
    # (the CPU) drafting must keep clearing the margin (a 2-core CPU's medians put depths that
    # break even 8% ahead: held there by one lucky choice they would lose), and every depth is
    # explored (the fit that prices sizes rarely seen needs their cells).
    hold_depth: bool = False
    # The depth every round takes while set (a warm-up measuring each depth: workers/warm_up.py).
    forced: int | None = None
    _rows: deque = field(default_factory=deque)  # (B, k, seconds)
    _seen: set = field(default_factory=set)  # (B, k) shapes whose first round was dropped
    _built_live: set = field(default_factory=set)  # ... dropped here, as a round (a build)
    _chosen: dict = field(default_factory=dict)  # B -> (round chosen at, depth)
    _held: int = 0  # the depth the last choice made or kept (explorations and probes aside)
    _tried: np.ndarray = field(init=False)  # [max_depth] decayed rows that reached position j
    _hit: np.ndarray = field(init=False)  # [max_depth] decayed rows accepted at position j
    _rounds: int = 0
    _drafted: float = 0.0  # decayed draft tokens proposed, all rows (a draining row's reference)
    _accepted: float = 0.0  # ... and accepted
    _first: dict = field(default_factory=dict)  # (B, k) -> fastest round seen (first included)
    _count: dict = field(default_factory=dict)  # (B, k) -> rounds seen
    _worst: dict = field(default_factory=dict)  # (B, k) -> slowest round seen
    _probed: set = field(default_factory=set)  # batch-size buckets whose warm-up is done
    _time_total: float = 0.0  # seconds of every round observed
    _explore_loss: float = 0.0  # predicted seconds exploration has cost over the best depth
    _last_k: int = -1  # the last round's depth
    # Seconds a round that changes depth costs over its shape's median (a backend that builds
    # a graph per shape rebuilds it: ~15-30 ms on an H200), recent switches only.
    _switch: deque = field(default_factory=lambda: deque(maxlen=16))
    # Finished rows' accepted over drafted draft tokens (those that drafted `drain_prior` or
    # more): the spread a new row's acceptance is expected from (workers/drain.py).
    _row_rates: deque = field(default_factory=lambda: deque(maxlen=64))
    # Seconds a shape's first round cost over its second (a graph build on MLX CUDA).
    _build: deque = field(default_factory=lambda: deque(maxlen=16))
    _explore_block: tuple = (-1, False)  # (explore_every block, its run approved)
    _warm: dict = field(default_factory=dict)  # (B, k) -> the warm-up's median seconds
    _warm_error: dict = field(default_factory=dict)  # (B, k) -> that median's relative error
    _one_offs: dict = field(default_factory=dict)  # (B, k) -> rounds set aside as one-offs
    _spiked: set = field(default_factory=set)  # (B, k) whose last round was set aside a spike

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"DepthPolicy.max_depth={self.max_depth} is invalid: use >= 1")
        self._tried = np.zeros(self.max_depth)
        self._hit = np.zeros(self.max_depth)

    def acceptance(self) -> np.ndarray:
        """[max_depth] conditional acceptance per draft position (0.5 before any evidence)."""
        out = np.empty(self.max_depth)
        prev = 0.5
        for j in range(self.max_depth):
            prev = self._hit[j] / self._tried[j] if self._tried[j] >= 1 else prev
            out[j] = prev
        return out

    # -- the choice -------------------------------------------------------------------------------
    def choose(self, batch_size: int) -> int:
        """The depth cap for the next round of `batch_size` rows (the same answer if asked
        twice before the round is observed)."""
        if self.hopeless:
            return 0
        if self.forced is not None:
            return self.forced
        k = self._probe(batch_size)
        if k is not None:
            return k
        run = min(self.run, self.explore_every)
        if self.explore_every and self._rounds % self.explore_every >= self.explore_every - run:
            # Every depth in turn, each every (max_depth + 1) * explore_every rounds, for `run`
            # rounds; with extremes_only the depths between are skipped, not replaced, so plain
            # decoding (a graph switch there) is explored no more often than with every depth.
            block = self._rounds // self.explore_every
            k = block % (self.max_depth + 1)
            if k in self.depths():
                if self._explore_block[0] != block:  # the run's first round: may it run?
                    could = self._could_change(batch_size, k)
                    self._explore_block = (block, could and self._may_explore(batch_size, k, run))
                if self._explore_block[1]:
                    return k
        at, depth = self._chosen.get(batch_size, (-self.refresh_every, 0))
        # A size's recent choice is reused; with `hold_depth` only if it is the depth held (15
        # rows chose plain, 16 then chose depth 3: 15 rows again choose afresh, not switch).
        if self._rounds - at < self.refresh_every and (not self.hold_depth or depth == self._held):
            self._held = depth
            return depth
        current = self._current(batch_size)
        drain = self.job_view() if self.job_end and self.job_view is not None else None
        if drain is not None and len(drain.remaining) == batch_size:
            best = self._drain_choice(drain, switching_from=current)
        else:
            costs = self.round_costs(batch_size)
            rates = self._rates(batch_size, switching_from=current, costs=costs)
            best = max(self.depths(), key=lambda j: rates[j])
            if rates[best] < (1 + self._margin(batch_size, best, costs=costs)) * rates[0]:
                # Drafting must pay by a clear margin to start: on a thin one, plain never
                # loses. With `hold_depth` a depth held is kept while its rate, uncharged for
                # switches (else each choice would charge plain the same switch again, and a
                # depth slower round after round could stay), is no lower than plain's.
                best = 0
                if self.hold_depth and current > 0:
                    uncharged = self._rates(batch_size, costs=costs)
                    best = current if uncharged[current] >= uncharged[0] else 0
        self._chosen[batch_size] = (self._rounds, best)
        self._held = best
        return best

    def _could_change(self, batch_size: int, k: int) -> bool:
        """Whether exploring depth k could change the choice (with `hold_depth`; else always
        explored): from plain, or toward a deeper depth, always (drafts not made teach no
        acceptance); from a drafting depth toward a shallower one, only where k's predicted
        rate is within twice the margin drafting needs of the held depth's."""
        held = self._held
        if not self.hold_depth or held == 0 or k >= held:
            return True
        costs = self.round_costs(batch_size)
        rates = self._rates(batch_size, costs=costs)
        reach = 1 + 2 * self._margin(batch_size, held, costs=costs)
        return bool(rates[k] * reach >= rates[held])

    def _drain_choice(self, drain: DrainingRows, switching_from: int) -> int:
        """The depth that finishes the job's rows soonest (workers/drain.py `job_depth`)."""
        B, ks = len(drain.remaining), range(self.max_depth + 1)
        depths = self.depths()  # the margins of these only: each scans the rounds kept
        table = self._round_costs_for(range(B + drain.free_slots + 1))
        cells = self._cells() if self.cap_by_larger else {}  # only caps need them
        e0 = self._cost_error(B, 0, table[B][0], cells)  # plain's, in every margin
        margin = np.full(len(ks), np.inf)  # depths not chosen from never clear it
        margin[0] = 0.0  # depth 0 clears no margin against itself
        for k in depths[1:]:
            margin[k] = self._margin(B, k, e0, table[B], cells)
        job = JobCosts(
            costs=table,
            acceptance=self.acceptance(),
            reference=self._accepted / self._drafted if self._drafted > 0 else 0.0,
            row_rates=np.array(self._row_rates),
            prior=self.drain_prior,
            once=np.array([self._once(B, k, switching_from) for k in ks]),
            margin=margin,
            depths=depths,
            current=switching_from if self.hold_depth else 0,
        )
        return job_depth(drain, job)

    @property
    def hopeless(self) -> bool:
        """The drafter costs about a target forward or more per step: never draft."""
        return self.draft_cost_ratio is not None and self.draft_cost_ratio >= self.hopeless_ratio

    def end_warm_up(self, sizes: Sequence[int]) -> None:
        """A warm-up ran every depth at these batch sizes on synthetic prompts: keep what its
        rounds cost (per shape, as live rounds), keep what they accepted as a prior worth
        `min_evidence` row-rounds only (the target's continuations of random prompts, not the
        traffic's text: 0.55/0.63/0.72 there against 0.78/0.79/0.77 on held-out prompts with
        the default model), and count the sizes' buckets warmed, so live traffic neither probes
        them nor waits for a probe to know whether rows joining there need what a drafter
        prepares (`settled_plain`)."""
        self.forced = None
        self._warm = cell_medians(self._rows)
        self._warm_error = {cell: self._median_error(*cell) for cell in self._warm}
        self._rows.clear()  # live medians start from live rounds (see `_cells`)
        weight = min(1.0, self.min_evidence / max(float(self._tried[0]), 1.0))
        self._tried *= weight
        self._hit *= weight
        # Nor are synthetic rows the reference a live row's own acceptance is read against
        # (workers/drain.py): read against it, the single stream's first request looked 0.73x
        # as good as the rows before it and decoded plainly, where drafting ran it 1.34x.
        self._drafted = self._accepted = 0.0
        self._probed |= {int(b).bit_length() for b in sizes}
        self._chosen.clear()
        self._held = 0
        self._switch.clear()  # interleaved rounds, each a switch: live switches measure it
        self._time_total = self._explore_loss = 0.0
        self._last_k = -1

    def forget_rounds(self) -> None:
        """Forget rounds run only to build shapes (workers/warm_up.py `build_shapes`): their
        costs and acceptance go, the settings stay, and so does what the backend showed: the
        shapes now built (no build is charged for them, their first live round counts) and
        the build and switch costs measured so far (few or none: the warm-up holds each shape
        one round). (Forgetting the shapes too, a
        draining batch of the trained hybrid on an H200 was charged builds at every smaller
        size at depth 3, and decoded its last row plainly for 46 rounds.)"""
        settings = {
            f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name[0] != "_"
        }
        settings.update(forced=None)
        kept = {"_seen": self._seen, "_build": self._build, "_switch": self._switch}
        self.__dict__.update(type(self)(**settings).__dict__)
        self.__dict__.update(kept)

    def settled_plain(self, batch_size: int) -> bool:
        """This batch size's warm-up is done (or none runs: `live_probes`) and drafting does
        not pay there: what a drafter would prepare for rows joining such a batch (an MTP
        head's prompt pairs) goes unused. Asks without choosing (no exploration is spent)."""
        if self.live_probes and int(batch_size).bit_length() not in self._probed:
            return False
        rates = self._rates(batch_size)[self.depths()]
        return bool(rates.max() < (1 + self.min_gain) * rates[0])

    def depths(self) -> list[int]:
        """The depths worth measuring and choosing (see `extremes_only`)."""
        return [0, self.max_depth] if self.extremes_only else list(range(self.max_depth + 1))

    def observe_row(self, drafted: int, accepted: int) -> None:
        """A row finished having proposed `drafted` draft tokens and had `accepted` accepted."""
        if drafted > 0 and drafted >= self.drain_prior:
            self._row_rates.append(accepted / drafted)
