"""Batch formation: which waiting requests go to which worker, now.

Pure code driven by a `now` argument (seconds on a monotonic clock: `now` never goes back
between calls): no Ray, no gRPC, no threads. The scheduler calls `submit` on arrival,
`form_batches` whenever something changes (arrival, capacity freed, timer from `next_wakeup`),
and `expire` to drop requests whose deadline passed while they waited.

Rules, in order:
1. Urgency: higher `priority` first, then earliest deadline (EDF), then arrival order.
2. Coalescing: a request is *due* once it has waited `coalesce_window_s` or its deadline is
   closer than the window. A length bucket may leave once it holds a due request, or enough
   requests to fill the free slots; then all its requests may leave. So arrivals are held for
   a few milliseconds at most, and requests arriving close together leave in one round.
3. Bucketing: requests are grouped by prompt-length bucket (powers of two); one batch holds one
   bucket, so a worker's prefill pads short prompts only up to about 2x.
4. Budgets: a worker takes a request only while it has a free slot and the request's worst-case
   KV footprint (prompt + max_tokens) fits its free KV tokens.
5. Placement: a request with a prefix key goes to the first of its prefix's owners that fits
   and is loaded at most `max_imbalance` more than the least loaded fitting worker, so prompts
   that start alike meet the worker that has their prefix cached (cluster/prefix_affinity.py);
   otherwise to the least-loaded worker that fits it (load = in-flight rows over batch slots),
   so equal workers fill evenly (cluster/fleet.py).
A request that fits no worker right now is skipped (smaller ones may backfill); a request that
could never fit any worker is the caller's to reject at admission (`fits_any`).

Cost: every structure is kept in order as requests arrive and leave, so a round costs
O(log n + log W) per request it looks at, and it looks only at requests of buckets that may
leave, stopping when no free slot is left. tests/cluster/reference_policy.py is the same rules
written as plain scans; property tests check both choose the same requests, workers and order.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

from cluster.fleet import Fleet, PlacementRound
from cluster.policy_types import (
    Batch,
    PendingRequest,
    PolicyConfig,
    QueueFullError,
    WorkerCapacity,
    bucket_of,
)

__all__ = [
    "Batch",
    "BatchPolicy",
    "Fleet",
    "PendingRequest",
    "PolicyConfig",
    "QueueFullError",
    "WorkerCapacity",
    "bucket_of",
]
# Heap entries that may be due are re-checked with the exact rule; this slack only decides
# which entries are worth checking (float sums like arrival + window round differently).
_SLACK_S = 1e-6
Urgency = tuple[int, float, float, int, str]  # (-priority, deadline or inf, arrival, seq, id)


@dataclass(slots=True)
class _Entry:
    request: PendingRequest
    bucket: int
    seq: int
    key: Urgency
    due: bool = False


@dataclass(slots=True)
class _Bucket:
    heap: list[Urgency] = field(default_factory=list)  # lazily deleted
    count: int = 0
    num_due: int = 0


class BatchPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._waiting: dict[str, _Entry] = {}
        self._buckets: dict[int, _Bucket] = {}
        self._seq = itertools.count()
        # (time, seq, id): when a request may become due (arrival + window, deadline - window).
        self._timers: list[tuple[float, int, str]] = []
        self._deadlines: list[tuple[float, int, str]] = []  # (deadline, seq, id)

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._waiting

    def submit(self, request: PendingRequest, *, requeue: bool = False) -> None:
        """Queue a request. Raises QueueFullError at the bound, unless it is a requeue (a request
        already accepted must never be dropped because a worker failed)."""
        rid = request.request_id
        if rid in self._waiting:
            raise ValueError(f"request_id {rid!r} is already waiting")
        if request.num_prompt_tokens < 1 or request.max_tokens < 1:
            raise ValueError(
                f"request {rid!r}: num_prompt_tokens={request.num_prompt_tokens} "
                f"and max_tokens={request.max_tokens} must both be >= 1"
            )
        if not requeue and len(self._waiting) >= self.config.max_queue:
            raise QueueFullError(
                f"waiting queue is full ({self.config.max_queue} requests): retry later or "
                "raise PolicyConfig.max_queue"
            )
        seq = next(self._seq)
        deadline = math.inf if request.deadline is None else request.deadline
        key = (-request.priority, deadline, request.arrival, seq, rid)
        b = bucket_of(request.num_prompt_tokens, self.config.min_bucket)
        self._waiting[rid] = _Entry(request, b, seq, key)
        bucket = self._buckets.get(b)
        if bucket is None:
            bucket = self._buckets[b] = _Bucket()
        bucket.count += 1
        heapq.heappush(bucket.heap, key)
        window = self.config.coalesce_window_s
        heapq.heappush(self._timers, (request.arrival + window, seq, rid))
        if request.deadline is not None:
            heapq.heappush(self._timers, (request.deadline - window, seq, rid))
            heapq.heappush(self._deadlines, (request.deadline, seq, rid))
        self._compact()

    def cancel(self, request_id: str) -> PendingRequest | None:
        e = self._waiting.pop(request_id, None)
        if e is None:
            return None
        bucket = self._buckets[e.bucket]
        bucket.count -= 1
        bucket.num_due -= e.due
        return e.request

    def expire(self, now: float) -> list[PendingRequest]:
        """Remove and return waiting requests whose deadline has passed (in arrival order)."""
        gone: list[_Entry] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq, rid = heapq.heappop(self._deadlines)
            e = self._live(seq, rid)
            if e is not None:
                gone.append(e)
        gone.sort(key=lambda e: e.seq)
        for e in gone:
            self.cancel(e.request.request_id)
        return [e.request for e in gone]

    def fits_any(self, request: PendingRequest, workers: list[WorkerCapacity]) -> bool:
        """Could this request ever run on some worker (when that worker is idle)?"""
        # Pass each worker's idle totals (max_slots, whole KV budget) as its capacity.
        return any(w.max_slots >= 1 and w.kv_free_tokens >= request.kv_tokens for w in workers)

    def form_batches(self, workers: list[WorkerCapacity] | Fleet, now: float) -> list[Batch]:
        """Take requests that may leave off the queue and group them into per-worker, per-bucket
        batches, ordered by their most urgent request.

        A list of capacities is not modified; a `Fleet` is charged for what is placed on it.
        """
        fleet = workers if isinstance(workers, Fleet) else Fleet.of(workers)
        if fleet.total_free_slots <= 0 or not self._waiting:
            return []
        self._mark_due(now)
        fill = max(1, min(fleet.total_free_slots, self.config.max_batch_size))
        # Which buckets may leave is decided once, from the queue as it is at the start.
        heads: list[tuple[Urgency, int]] = []
        for b, bucket in self._buckets.items():
            if bucket.count and (bucket.num_due or bucket.count >= fill):
                if (head := self._head(bucket)) is not None:
                    heads.append((head, b))
        heapq.heapify(heads)
        rnd = PlacementRound(fleet, self.config.max_batch_size)
        held: list[tuple[int, Urgency]] = []
        while heads and fleet.total_free_slots > 0:
            key, b = heads[0]
            bucket = self._buckets[b]
            heapq.heappop(bucket.heap)
            e = self._waiting[key[4]]
            if rnd.place(e.request, b):
                self.cancel(key[4])
            else:
                held.append((b, key))  # fits no worker now: a smaller one may backfill
            if (head := self._head(bucket)) is not None:
                heapq.heapreplace(heads, (head, b))
            else:
                heapq.heappop(heads)
        for b, key in held:
            heapq.heappush(self._buckets[b].heap, key)
        return rnd.result()

    def may_leave(self, total_free_slots: int) -> bool:
        """Could a round dispatch something now? True when some bucket holds a request known
        to be due or enough requests to fill the free slots; requests whose timer has passed
        since the last round are not counted (that timer wakes the caller anyway). Lets the
        caller skip rounds that would find nothing, in O(number of buckets)."""
        if total_free_slots <= 0:
            return False
        fill = max(1, min(total_free_slots, self.config.max_batch_size))
        return any(b.count and (b.num_due or b.count >= fill) for b in self._buckets.values())

    def first_timer(self, request: PendingRequest) -> float:
        """The earliest time at which this request needs a round (due, or near its deadline)."""
        t = request.arrival + self.config.coalesce_window_s
        if request.deadline is not None:
            t = min(t, request.deadline - self.config.coalesce_window_s)
        return t

    def next_wakeup(self, now: float) -> float | None:
        """Earliest future time at which a waiting request becomes due or expires; None when
        nothing is pending in the future (due-but-blocked requests wait for freed capacity)."""
        self._mark_due(now)
        times = (self._first_future(self._timers, now), self._first_future(self._deadlines, now))
        return min((t for t in times if t is not None), default=None)

    # -- internals ------------------------------------------------------------------------------
    def _live(self, seq: int, rid: str) -> _Entry | None:
        e = self._waiting.get(rid)
        return e if e is not None and e.seq == seq else None

    def _head(self, bucket: _Bucket) -> Urgency | None:
        """The bucket's most urgent waiting request (dropping cancelled entries on the way)."""
        heap = bucket.heap
        while heap:
            key = heap[0]
            if self._live(key[3], key[4]) is not None:
                return key
            heapq.heappop(heap)
        return None

    def _is_due(self, r: PendingRequest, now: float) -> bool:
        window = self.config.coalesce_window_s
        return (
            now - r.arrival >= window - 1e-9  # tolerate float rounding of clock sums
            or (r.deadline is not None and r.deadline - now <= window)
        )

    def _mark_due(self, now: float) -> None:
        """Mark requests whose timer passed as due (a request stays due: `now` only grows)."""
        timers, aside = self._timers, []
        while timers and timers[0][0] <= now + _SLACK_S:
            entry = heapq.heappop(timers)
            e = self._live(entry[1], entry[2])
            if e is None:
                continue
            if not e.due and self._is_due(e.request, now):
                e.due = True
                self._buckets[e.bucket].num_due += 1
            if entry[0] > now or not e.due:
                aside.append(entry)  # still a future wake-up (next_wakeup reports it)
        for entry in aside:
            heapq.heappush(timers, entry)

    def _first_future(self, heap: list[tuple[float, int, str]], now: float) -> float | None:
        aside, found = [], None
        while heap:
            entry = heap[0]
            if self._live(entry[1], entry[2]) is None:
                heapq.heappop(heap)
            elif entry[0] <= now:
                aside.append(heapq.heappop(heap))  # past but not yet acted on (expire, due)
            else:
                found = entry[0]
                break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    def _compact(self) -> None:
        """Rebuild a heap once most of it is entries of requests that already left."""
        n = len(self._waiting)
        if len(self._timers) > 6 * n + 64:
            self._timers = [x for x in self._timers if self._live(x[1], x[2])]
            heapq.heapify(self._timers)
        if len(self._deadlines) > 2 * n + 64:
            self._deadlines = [x for x in self._deadlines if self._live(x[1], x[2])]
            heapq.heapify(self._deadlines)
        for bucket in self._buckets.values():
            if len(bucket.heap) > 2 * bucket.count + 64:
                bucket.heap = [k for k in bucket.heap if self._live(k[3], k[4])]
                heapq.heapify(bucket.heap)
