"""The engine's pipelined step: launch round N+1, then collect round N (workers/pipeline.py says
what a launched round leaves on the device and how it is read back).

A mixin of `Engine` (workers/engine.py runs construction, the public API and the synchronous
round; workers/membership.py the rows joining and leaving): the state it reads and writes is the
engine's, declared below for type checkers, and tools that wrap an engine's methods by name
(bench/round_split.py, bench/step_kernels.py) still find them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import mlx.core as mx
import numpy as np

from workers.drafters.base import Proposal
from workers.launch import Launcher
from workers.membership import Membership
from workers.pipeline import Flight, last_tokens, settle_before
from workers.rows import emit_round
from workers.types import RequestOutput, RoundStats
from workers.verify import greedy_outcome, token_logprobs


class PipelinedRounds(Membership):
    route_joins: bool
    _launcher: Launcher | None
    _launch_rows: int | None
    _flights: list[Flight]  # launched, not read yet, oldest first (EngineConfig.pipeline_depth)
    _device_drafter: bool
    _wait_before_launch: bool
    _verify_hidden: mx.array | None

    # The round's parts, shared with the synchronous round (workers/engine.py):
    _draft: Callable[..., Proposal]  # (sampling, in_flight) -> the round's drafts
    _window: Callable[[mx.array, Proposal], mx.array]  # -> [B, K+1] verify input
    _forward: Callable[[mx.array, np.ndarray], mx.array]  # -> logits [B, K+1, V]

    @property
    def _flight(self) -> Flight | None:
        """The newest round launched and not read yet: the next round's inputs come from it."""
        return self._flights[-1] if self._flights else None

    def _in_flight_tokens(self) -> int:
        """The most tokens a row may have emitted in rounds launched and not read yet."""
        return sum(f.width for f in self._flights)

    def _pipelined(self) -> bool:
        """Can the next round be built without reading the last one back?"""
        if not self.config.pipeline:
            return False
        rows = self.rows + list(self._prefill.rows if self._prefill else [])
        if not all(r.params.is_greedy and not r.params.penalised for r in rows):
            return False
        if self._device_drafter:
            return True
        # A host-side drafter (draft model, n-grams) needs exact histories, unless the depth
        # policy drafts nothing this round: then the round is plain decoding.
        return self.depth_policy is not None and self.depth_policy.choose(len(self.rows)) == 0

    def _pipelined_step(self, stats: RoundStats) -> list[RequestOutput]:
        """launch N+1 -> collect N (host work overlaps the device) -> leave -> admit; with
        `pipeline_depth` 2, launch N+2 -> collect N."""
        launcher, rows_min = self._launcher, self._launch_rows
        if launcher is not None and rows_min is not None and len(self.rows) < rows_min:
            self.settle()  # launched here: the last launch must be done (and must not have failed)
            launcher = None
        t0 = time.perf_counter()  # after that wait (see launch_s below)
        with _routing(launcher):
            launched = self._launch() if self.rows else None
        t1 = time.perf_counter()
        if launched is not None:
            # Not the waits for the launcher thread to finish the launch before (the hand-off's,
            # or the idle above): what that launch cost beyond the round (a graph switch or
            # build for its shape) would land in this round's cost, and a depth probed or
            # explored among plain rounds read 15 ms a round on the H200 where held it ran
            # 3-5 (bench/results/s35).
            handoff = launched.ticket.handoff_s if launched.ticket is not None else 0.0
            prev_wait = self._flight.wait_s if self._flight else 0.0
            launched.launch_s = t1 - t0 - prev_wait - handoff
            self._flights.append(launched)
        events: list[RequestOutput] = []
        # The oldest round is read once more than `pipeline_depth` are out, or once nothing
        # new was launched (the batch drains: one round a step).
        out = len(self._flights) > self.config.pipeline_depth or launched is None
        flight = self._flights.pop(0) if out and self._flights else None
        # Rows leave and join routed too: what a join evaluates (its prefill) then queues behind
        # the launch, and neither waits for it (Membership.settle_unless_routed).
        with _routing(launcher if self.route_joins else None):
            if flight is not None:
                events += self._collect(flight, stats)
                events += [e for r in self.rows if (e := r.take_event()) is not None]
                t_drop = time.perf_counter()
                events += self._drop_finished()  # finished in N: their N+1 slots are discarded
                if launched is not None:
                    # A leave evaluates the rows it moves (cache_rows.py `keep_in_place`), so it waits
                    # for N+1's forward: that wait is N+1's cost, not N's.
                    drop_s = time.perf_counter() - t_drop
                    launched.launch_s += drop_s
                    t1 += drop_s
            t2 = time.perf_counter()
            if self.rows or self.waiting:
                self._admit(stats)  # joiners prefill now and join round N+2
        if flight is not None and self.depth_policy is not None:
            # Round N's cost: building and launching it (last step) plus waiting for and
            # emitting it (this step). This step's launch belongs to N+1, whose depth may
            # differ: on a backend that computes while launching (the CPU) it is most of N+1.
            counts, accepted = flight.counts, stats.accepted_per_row
            cost = flight.launch_s + flight.wait_s + (t2 - t1)
            self.depth_policy.observe(counts[: len(accepted)], np.asarray(accepted), cost)
        return events

    def _launch(self) -> Flight:
        """Build the next round from device state and start it; reads nothing back."""
        prev = self._flight
        rows = list(self.rows)
        proposal = self._draft(None, in_flight=self._in_flight_tokens())
        if self._wait_before_launch:
            settle_before(prev, proposal.counts)
        last = last_tokens(self.rows, prev)
        window = self._window(last, proposal)  # [B, K+1]
        logits = self._forward(window, np.asarray(proposal.counts, dtype=np.int64) + 1)
        num_accepted, tokens = greedy_outcome(logits, proposal)
        want_logprobs = any(r.params.logprobs for r in rows)
        logprobs = token_logprobs(logits, tokens) if want_logprobs else None
        # A plain round commits exactly one token per row: the host's lengths stay exact.
        self.cache.commit_lazy(num_accepted + 1, window.shape[1], all_most=window.shape[1] == 1)
        if self.drafter is not None and self._device_drafter:
            self.drafter.commit(num_accepted, self._verify_hidden, tokens)
        if window.shape[1] == 1:  # a plain round: its one token is the newest
            new_last = tokens[:, 0]
        else:
            new_last = mx.take_along_axis(tokens, num_accepted[:, None], axis=1)[:, 0]
        flight = Flight(rows, proposal.counts, num_accepted, tokens, new_last, logprobs,
                         window.shape[1])  # fmt: skip
        flight.launch(copies=self._launcher is not None)
        return flight

    def _collect(self, flight: Flight, stats: RoundStats) -> list[RequestOutput]:
        """Read a launched round back (waits for it) and emit its tokens."""
        t0 = time.perf_counter()
        verdict = flight.read_back()
        stats.time_verify_s = time.perf_counter() - t0  # the device time the host waited for
        emit_round(flight.rows, flight.counts, verdict, stats)
        # Tighten the host's length bounds: a live row's cache holds its history but the last
        # token, plus at most one window of each round still in flight.
        inflight = self._in_flight_tokens()
        live = np.array([not r.is_finished for r in self.rows], dtype=bool)
        exact = np.array([len(r.history) - 1 for r in self.rows], dtype=np.int64)
        self.cache.tighten(exact + inflight, live, exact=inflight <= 1)
        tighten = getattr(self.drafter, "tighten", None)
        if tighten is not None:
            tighten(exact, live)
        return []


def _routing(launcher: Launcher | None) -> contextlib.AbstractContextManager[None]:
    """Launches inside go through `launcher` (workers/launch.py); None: MLX's own calls."""
    return launcher.routing() if launcher is not None else contextlib.nullcontext()
