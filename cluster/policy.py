"""Batch formation: which waiting requests go to which worker, now.

Pure code driven by a `now` argument (seconds on any monotonic clock): no Ray, no gRPC, no
threads. The scheduler calls `submit` on arrival, `form_batches` whenever something changes
(arrival, capacity freed, timer from `next_wakeup`), and `expire` to drop requests whose
deadline passed while they waited.

Rules, in order:
1. Urgency: higher `priority` first, then earliest deadline (EDF), then arrival order.
2. Coalescing: a request becomes dispatchable once it has waited `coalesce_window_s`, or its
   length bucket already holds enough requests to fill the free slots, or its deadline is
   closer than the window. So arrivals are held for a few milliseconds at most.
3. Bucketing: requests are grouped by prompt-length bucket (powers of two); one batch holds one
   bucket, so a worker's prefill pads short prompts only up to about 2x.
4. Budgets: a worker takes a request only while it has a free slot and the request's worst-case
   KV footprint (prompt + max_tokens) fits its free KV tokens.
5. Placement: each request goes to the least-loaded worker that fits it (load = in-flight rows
   over batch slots), so equal workers fill evenly.
A request that fits no worker right now is skipped (smaller ones may backfill); a request that
could never fit any worker is the caller's to reject at admission (`fits_any`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field


class QueueFullError(Exception):
    """The waiting queue is at its bound: the caller should retry later (RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class PolicyConfig:
    max_queue: int = 4096
    coalesce_window_s: float = 0.003
    # Largest number of requests sent to one worker in one dispatch message.
    max_batch_size: int = 64
    # Prompt lengths up to min_bucket share the first bucket; above it buckets double.
    min_bucket: int = 16

    def __post_init__(self) -> None:
        if isinstance(self.max_queue, bool) or not isinstance(self.max_queue, int):
            raise ValueError(f"PolicyConfig.max_queue={self.max_queue!r}: pass an int >= 1")
        if self.max_queue < 1:
            raise ValueError(f"PolicyConfig.max_queue={self.max_queue!r}: pass an int >= 1")
        if not (0.0 <= self.coalesce_window_s <= 0.05):
            raise ValueError(
                f"PolicyConfig.coalesce_window_s={self.coalesce_window_s!r}: use 0..0.05 s "
                "(a few milliseconds at most)"
            )
        if self.max_batch_size < 1:
            raise ValueError(f"PolicyConfig.max_batch_size={self.max_batch_size!r}: use >= 1")
        if self.min_bucket < 1:
            raise ValueError(f"PolicyConfig.min_bucket={self.min_bucket!r}: use >= 1")


@dataclass
class PendingRequest:
    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    arrival: float
    priority: int = 0
    deadline: float | None = None  # absolute, same clock as `now`

    @property
    def kv_tokens(self) -> int:
        """Worst-case KV footprint on a worker: every prompt and generated position."""
        return self.num_prompt_tokens + self.max_tokens


@dataclass
class WorkerCapacity:
    """What one worker can take now (reported info minus what is already in flight)."""

    worker_id: str
    free_slots: int
    kv_free_tokens: int
    num_inflight: int
    max_slots: int

    @property
    def load(self) -> float:
        return self.num_inflight / max(self.max_slots, 1)


@dataclass
class Batch:
    worker_id: str
    bucket: int
    requests: list[PendingRequest] = field(default_factory=list)

    @property
    def num_real_tokens(self) -> int:
        return sum(r.num_prompt_tokens for r in self.requests)

    @property
    def num_padded_tokens(self) -> int:
        """Tokens a left-padded prefill of this batch processes: rows x longest prompt."""
        return len(self.requests) * max((r.num_prompt_tokens for r in self.requests), default=0)

    @property
    def padding_ratio(self) -> float:
        padded = self.num_padded_tokens
        return 0.0 if padded == 0 else 1.0 - self.num_real_tokens / padded


def bucket_of(num_prompt_tokens: int, min_bucket: int) -> int:
    """Upper edge of the power-of-two bucket holding this prompt length."""
    if num_prompt_tokens <= min_bucket:
        return min_bucket
    return min_bucket * 2 ** math.ceil(math.log2(num_prompt_tokens / min_bucket))


class BatchPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._waiting: dict[str, PendingRequest] = {}
        self._seq = itertools.count()
        self._order: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._waiting

    def submit(self, request: PendingRequest, *, requeue: bool = False) -> None:
        """Queue a request. Raises QueueFullError at the bound, unless it is a requeue (a request
        already accepted must never be dropped because a worker failed)."""
        if request.request_id in self._waiting:
            raise ValueError(f"request_id {request.request_id!r} is already waiting")
        if request.num_prompt_tokens < 1 or request.max_tokens < 1:
            raise ValueError(
                f"request {request.request_id!r}: num_prompt_tokens={request.num_prompt_tokens} "
                f"and max_tokens={request.max_tokens} must both be >= 1"
            )
        if not requeue and len(self._waiting) >= self.config.max_queue:
            raise QueueFullError(
                f"waiting queue is full ({self.config.max_queue} requests): retry later or "
                "raise PolicyConfig.max_queue"
            )
        self._waiting[request.request_id] = request
        self._order[request.request_id] = next(self._seq)

    def cancel(self, request_id: str) -> PendingRequest | None:
        self._order.pop(request_id, None)
        return self._waiting.pop(request_id, None)

    def expire(self, now: float) -> list[PendingRequest]:
        """Remove and return waiting requests whose deadline has passed."""
        gone = [r for r in self._waiting.values() if r.deadline is not None and r.deadline <= now]
        for r in gone:
            self.cancel(r.request_id)
        return gone

    def fits_any(self, request: PendingRequest, workers: list[WorkerCapacity]) -> bool:
        """Could this request ever run on some worker (when that worker is idle)?"""
        # Pass each worker's idle totals (max_slots, whole KV budget) as its capacity.
        return any(w.max_slots >= 1 and w.kv_free_tokens >= request.kv_tokens for w in workers)

    def _urgency(self, r: PendingRequest) -> tuple[int, float, float, int]:
        deadline = math.inf if r.deadline is None else r.deadline
        return (-r.priority, deadline, r.arrival, self._order[r.request_id])

    def _ready(self, now: float, total_free_slots: int) -> list[PendingRequest]:
        """Waiting requests allowed to leave now, most urgent first (rule 2)."""
        window = self.config.coalesce_window_s
        counts: dict[int, int] = {}
        for r in self._waiting.values():
            b = bucket_of(r.num_prompt_tokens, self.config.min_bucket)
            counts[b] = counts.get(b, 0) + 1
        fill = max(1, min(total_free_slots, self.config.max_batch_size))
        ready = [
            r
            for r in self._waiting.values()
            if now - r.arrival >= window - 1e-9  # tolerate float rounding of clock sums
            or counts[bucket_of(r.num_prompt_tokens, self.config.min_bucket)] >= fill
            or (r.deadline is not None and r.deadline - now <= window)
        ]
        ready.sort(key=self._urgency)
        return ready

    def form_batches(self, workers: list[WorkerCapacity], now: float) -> list[Batch]:
        """Take ready requests off the queue and group them into per-worker, per-bucket batches.

        `workers` is not modified; the returned batches are ordered by their most urgent request.
        """
        free = {w.worker_id: [w.free_slots, w.kv_free_tokens, w.num_inflight] for w in workers}
        max_slots = {w.worker_id: max(w.max_slots, 1) for w in workers}
        total_free = sum(max(w.free_slots, 0) for w in workers)
        if total_free <= 0 or not self._waiting:
            return []
        batches: dict[tuple[str, int], Batch] = {}
        order: list[tuple[str, int]] = []
        for r in self._ready(now, total_free):
            b = bucket_of(r.num_prompt_tokens, self.config.min_bucket)
            fitting = [
                wid
                for wid, (slots, kv, _) in free.items()
                if slots >= 1
                and kv >= r.kv_tokens
                and len(batches.get((wid, b), Batch(wid, b)).requests) < self.config.max_batch_size
            ]
            if not fitting:
                continue  # a smaller request may still backfill; this one waits (or expires)
            # Least loaded; ties go to the worker already holding a batch of this bucket.
            wid = min(fitting, key=lambda w: (free[w][2] / max_slots[w], (w, b) not in batches, w))
            key = (wid, b)
            if key not in batches:
                batches[key] = Batch(wid, b)
                order.append(key)
            batches[key].requests.append(r)
            free[wid][0] -= 1
            free[wid][1] -= r.kv_tokens
            free[wid][2] += 1
            self.cancel(r.request_id)
        return [batches[k] for k in order]

    def next_wakeup(self, now: float) -> float | None:
        """Earliest future time at which a waiting request becomes ready or expires; None when
        nothing is pending in the future (ready-but-blocked requests wait for freed capacity)."""
        times: list[float] = []
        for r in self._waiting.values():
            times.append(r.arrival + self.config.coalesce_window_s)
            if r.deadline is not None:
                times.append(r.deadline - self.config.coalesce_window_s)
                times.append(r.deadline)
        future = [t for t in times if t > now]
        return min(future) if future else None
