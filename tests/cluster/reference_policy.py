"""The simple batch policy (scan every waiting request and every worker each round), kept as
the reference that cluster/policy.py's indexed structures must agree with exactly: same
requests, same worker, same order. Rules as listed in cluster/policy.py's docstring. Not fast:
O(waiting x workers) per round, which is why cluster/policy.py does not work this way."""

from __future__ import annotations

import itertools
import math

from cluster.policy import (
    Batch,
    PendingRequest,
    PolicyConfig,
    QueueFullError,
    WorkerCapacity,
    bucket_of,
)


class ReferencePolicy:
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
        """Waiting requests allowed to leave now, most urgent first (rule 2): every request of a
        bucket that holds a due request or enough requests to fill the free slots."""
        window = self.config.coalesce_window_s
        counts: dict[int, int] = {}
        due: set[int] = set()
        for r in self._waiting.values():
            b = bucket_of(r.num_prompt_tokens, self.config.min_bucket)
            counts[b] = counts.get(b, 0) + 1
            if now - r.arrival >= window - 1e-9 or (
                r.deadline is not None and r.deadline - now <= window
            ):
                due.add(b)
        fill = max(1, min(total_free_slots, self.config.max_batch_size))
        ready = [
            r
            for r in self._waiting.values()
            if (b := bucket_of(r.num_prompt_tokens, self.config.min_bucket)) in due
            or counts[b] >= fill
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
