"""The engine's membership: requests arriving and aborting, prompts prefilling and joining the
running batch, finished rows leaving, and what a depth policy is shown of the rows still to run
(workers/engine.py and workers/pipelined_rounds.py run the rounds; this is the rest of its
step).

A mixin of `Engine`: the state it reads and writes is the engine's (declared below for type
checkers), so tools that wrap an engine's methods by name (bench/round_split.py) still find them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque

from workers import launch
from workers.cache_rows import fill_holes
from workers.config import EngineConfig
from workers.depth_policy import DepthPolicy
from workers.drafters.base import Drafter
from workers.drafting import joining_tail
from workers.drain import JOB_TAIL_ROWS, QUIET_STEPS, DrainingRows
from workers.join_gate import JoinGate
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant
from workers.language_model import LanguageModel
from workers.prefill_job import Prefill, fits_kv, pick_joining, prompt_hidden, start_prefill
from workers.prefix_cache import PrefixCache
from workers.row_factory import RowFactory
from workers.rows import Row
from workers.types import RequestOutput, RoundStats


class Membership:
    config: EngineConfig
    model: LanguageModel
    cache: BatchCache
    drafter: Drafter | None
    depth_policy: DepthPolicy | None
    join_gate: JoinGate
    _joins_started: int
    kv_quant: KVQuant | None
    kv_budget: int
    row_factory: RowFactory
    prefix_cache: PrefixCache
    pad_verify: bool
    _needs_hidden: bool
    _post_norm: bool
    _prefill: Prefill | None
    _quiet_steps: int
    rows: list[Row]
    waiting: deque[Row]
    _inbox: deque[tuple[str, object]]
    _lock: threading.Lock
    _live_ids: set[str]

    def _job_view(self) -> DrainingRows | None:
        """What the depth policy weighs when it chooses afresh (`DepthPolicy.job_view`): once
        the job's end is in sight (no request arrived for QUIET_STEPS steps, at most
        JOB_TAIL_ROWS wait per running row), the rows still to run (workers/drain.py); else
        None, and tokens per second decide. A lone row with none to follow is no tail:
        finishing it soonest is decoding it fastest."""
        B = len(self.rows)
        if not B or self._quiet_steps < QUIET_STEPS or len(self.waiting) > JOB_TAIL_ROWS * B:
            return None
        joining = list(self._prefill.rows) if self._prefill else []
        tail = joining + list(self.waiting)  # in the order they join
        if B + len(tail) <= 1:
            return None
        # Joiners take these at once (held up to join_wait_steps with the join gate on)
        free = max(0, self.config.max_batch_size - B)
        return DrainingRows.of(self.rows, tail, free_slots=free)

    # -- membership -----------------------------------------------------------------------------
    def _take_new_work(self) -> list[RequestOutput]:
        with self._lock:
            inbox, self._inbox = self._inbox, deque()
        events = []
        self._quiet_steps += 1
        for kind, item in inbox:
            if kind == "add":
                assert isinstance(item, Row)
                self.waiting.append(item)
                self._quiet_steps = 0
            else:
                events += self._abort_now(str(item))
        return events

    def _abort_now(self, request_id: str) -> list[RequestOutput]:
        for row in self.rows:
            if row.request_id == request_id and not row.is_finished:
                row.finish_reason = "abort"  # the round-end sweep drops it and emits the event
                return []
        for row in self._prefill.rows if self._prefill else []:
            if row.request_id == request_id and not row.is_finished:
                row.finish_reason = "abort"  # dropped (with its event) once its prefill joins
                return []
        for row in list(self.waiting):
            if row.request_id == request_id:
                self.waiting.remove(row)
                row.finish_reason = "abort"
                self._forget(row.request_id)
                event = row.take_event()
                return [event] if event else []
        return []  # unknown or already finished: aborting is idempotent

    def _admit(self, stats: RoundStats) -> None:
        """Prefill joining rows one chunk per step while others decode, then join them.

        Chunking the prefill bounds how long a long prompt stalls the running rows' tokens;
        with nothing running, the whole prompt goes through at once.
        """
        # A prefill evaluates, so unrouted it settles first (the launcher's last launch), but
        # only where a prefill starts or advances: with a queue and every slot taken (served
        # traffic) nothing joins, and a wait every step would serialise the next round's launch
        # with this step's host work. Routed, its chunks queue behind that launch instead (and
        # time_prefill_s is the host's building of them alone).
        if self._prefill is None:
            if not self.waiting:
                return
            free = self.config.max_batch_size - len(self.rows)
            # Held a step or more, to join with others (workers/join_gate.py); a full batch
            # (served traffic's steady state: the queue waits) closes the gate.
            if not self.join_gate.should_join(len(self.rows), free, len(self.waiting)):
                return
            joining = pick_joining(
                self.waiting, self.rows, self._reserve, self.kv_budget,
                self.config.max_batch_size, self.prefix_cache, not self.pad_verify,
            )  # fmt: skip
            if not joining:
                return
            if len(joining) < min(free, len(self.waiting) + len(joining)):
                self.join_gate.follow_up()  # the rest of the ready rows prefill next
            self.settle_unless_routed()
            tail = joining_tail(
                self.drafter, self._needs_hidden, self.depth_policy, self._batch_joined(joining)
            )
            self._prefill = start_prefill(
                self.model, self.kv_quant, self.prefix_cache, joining, tail, stats
            )
            self._joins_started += 1
        else:
            self.settle_unless_routed()
        p = self._prefill
        t0 = time.perf_counter()
        done = p.advance(
            self.model, self.config.prefill_step_size, self._post_norm,
            one_chunk=bool(self.rows),
        )  # fmt: skip
        stats.time_prefill_s = time.perf_counter() - t0
        if not done:
            return
        self._prefill = None
        stats.num_prefill_tokens = sum(r.prompt_len for r in p.rows)  # counted once, on joining
        hidden = prompt_hidden(p) if self._needs_hidden else None
        for i, r in enumerate(p.rows):
            self.prefix_cache.insert(r.history[:-1], p.cache, i, *p.row_hidden(i))
        stats.num_prefix_evicted_tokens = self.prefix_cache.take_stats().evicted
        stats.prefix_cache_used_tokens = self.prefix_cache.used_tokens
        self.cache.append(p.cache)
        if self.drafter is not None:
            self.drafter.add_rows([r.history for r in p.rows], hidden)
        self.rows.extend(p.rows)

    def _drop_finished(self) -> list[RequestOutput]:
        """Remove finished rows from the batch; returns the events they have not sent yet."""
        keep = [i for i, r in enumerate(self.rows) if not r.is_finished]
        if len(keep) == len(self.rows):
            return []
        # The batch's last rows fill the holes (workers/cache_rows.py): the cache moves
        # those rows only, not every row, and the rows, the cache and the drafter take one order.
        keep = fill_holes(keep, len(self.rows))
        self.settle_unless_routed()  # the batch changes
        events = []
        for r in self.rows:
            if r.is_finished:
                self._forget(r.request_id)
                events.append(r.take_event())
                if self.depth_policy is not None and r.finish_reason != "abort":
                    self.depth_policy.observe_row(r.num_draft_tokens, r.num_accepted_tokens)
        self.rows = [self.rows[i] for i in keep]
        self.cache.keep_rows(keep)
        if self.drafter is not None:
            self.drafter.keep_rows(keep)
        return [e for e in events if e is not None]

    def settle(self) -> None:
        """Wait until a round handed to a launcher thread is encoded (the engine's)."""
        raise NotImplementedError

    def settle_unless_routed(self) -> None:
        """Settle before the batch changes, unless the step routes its evaluations through a
        launcher thread (workers/launch.py): then a leaving row's cache gather only builds a
        graph, and whatever a join evaluates (its prefill chunks, prefix-cache copies) is
        queued behind the launch without a wait (`launch.evaluate_behind`). On the H200 the
        settle and the prefill's encode on this thread were ~6 of a depth-3 join step's ~15 ms
        (bench/results/s40)."""
        if not launch.routed():
            self.settle()

    def _forget(self, request_id: str) -> None:
        with self._lock:
            self._live_ids.discard(request_id)

    def _batch_joined(self, joining: list[Row]) -> int:
        """Rows in the batch `joining` will run in: the running rows, the joiners, and the
        waiting requests that take the free slots at the next joins, as far as the KV budget
        holds them (a batch job's queue fills the batch within a few steps, though rows of
        other lengths prefill as groups of their own: workers/prefill_job.py)."""
        batch = len(self.rows) + len(joining)
        used = sum(self._reserve(r) for r in (*self.rows, *joining))
        for row in itertools.islice(self.waiting, max(0, self.config.max_batch_size - batch)):
            need = self._reserve(row)
            if not fits_kv(used, need, self.kv_budget):
                break
            used += need
            batch += 1
        return batch

    def _reserve(self, row: Row) -> int:
        return self.row_factory.reserve(row.prompt_len, row.params)
