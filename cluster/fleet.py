"""Workers indexed by load, so placing a request costs O(log W) instead of a scan of the fleet.

Pure data structure (no clock, no I/O), used by `cluster/policy.py`. The scheduler keeps one
`Fleet` for its life and tells it what changes: a worker joins or leaves (`set` / `remove`), a
request finishes (`release`); placement charges it (`PlacementRound.place`). Tests build one per
call from a list of `WorkerCapacity` (`Fleet.of`).

Placement rule (policy rule 5): among the workers that fit the request (a free slot, enough free
KV tokens, and fewer than max_batch_size requests of its bucket in this round), the least loaded
(load = in-flight rows / max slots); ties go to a worker already holding a batch of the bucket,
then to the smallest worker id. A heap of (load, worker id) over workers with a free slot finds
the least loaded; a per-round heap per bucket over the workers holding a batch of that bucket
finds the best tie-breaker. Entries are never updated in place: a change pushes a new entry and
stale ones (older version, or a load that no longer matches) are dropped when they surface.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.policy_types import Batch, PendingRequest, WorkerCapacity
from cluster.prefix_affinity import AffinityRing


@dataclass(slots=True)
class _Worker:
    worker_id: str
    free_slots: int
    kv_free_tokens: int
    num_inflight: int
    max_slots: int  # >= 1
    version: int

    @property
    def load(self) -> float:
        return self.num_inflight / self.max_slots


class Fleet:
    def __init__(self, affinity: AffinityRing | None = None) -> None:
        self._workers: dict[str, _Worker] = {}
        # Prefix-aware placement (cluster/prefix_affinity.py): members are the workers known.
        self.affinity = affinity if affinity is not None else AffinityRing()
        self._heap: list[tuple[float, str, int]] = []  # (load, worker id, version), free slot
        self._versions = itertools.count()
        self.total_free_slots = 0  # sum of max(free_slots, 0), kept incrementally

    @classmethod
    def of(cls, workers: list[WorkerCapacity]) -> Fleet:
        fleet = cls()
        for w in workers:
            fleet.set(w)
        return fleet

    def __len__(self) -> int:
        return len(self._workers)

    def __contains__(self, worker_id: str) -> bool:
        return worker_id in self._workers

    def set(self, cap: WorkerCapacity) -> None:
        """A worker joins (or its capacity is re-read): replace what the index knows of it."""
        self._drop(cap.worker_id)
        self.affinity.add(cap.worker_id)
        w = _Worker(
            cap.worker_id,
            cap.free_slots,
            cap.kv_free_tokens,
            cap.num_inflight,
            max(cap.max_slots, 1),
            next(self._versions),
        )
        self._workers[w.worker_id] = w
        self.total_free_slots += max(w.free_slots, 0)
        self._push(w)

    def remove(self, worker_id: str) -> None:
        """A worker leaves: its prefixes re-home to their next owners."""
        self._drop(worker_id)
        self.affinity.remove(worker_id)

    def _drop(self, worker_id: str) -> None:
        w = self._workers.pop(worker_id, None)
        if w is not None:
            self.total_free_slots -= max(w.free_slots, 0)

    def release(self, worker_id: str, kv_tokens: int) -> None:
        """A request held on this worker finished or was requeued: give its slot and KV back."""
        w = self._workers.get(worker_id)
        if w is not None:
            self._change(w, +1, kv_tokens)

    def capacity(self, worker_id: str) -> WorkerCapacity:
        w = self._workers[worker_id]
        return WorkerCapacity(
            w.worker_id, w.free_slots, w.kv_free_tokens, w.num_inflight, w.max_slots
        )

    def _change(self, w: _Worker, slots: int, kv_tokens: int) -> None:
        self.total_free_slots -= max(w.free_slots, 0)
        w.free_slots += slots
        w.kv_free_tokens += kv_tokens
        w.num_inflight -= slots
        w.version = next(self._versions)
        self.total_free_slots += max(w.free_slots, 0)
        self._push(w)

    def _push(self, w: _Worker) -> None:
        if w.free_slots >= 1:
            heapq.heappush(self._heap, (w.load, w.worker_id, w.version))
            if len(self._heap) > 4 * len(self._workers) + 64:  # drop stale entries
                self._heap = [
                    (x.load, x.worker_id, x.version)
                    for x in self._workers.values()
                    if x.free_slots >= 1
                ]
                heapq.heapify(self._heap)

    def _valid(self, entry: tuple[float, str, int]) -> _Worker | None:
        w = self._workers.get(entry[1])
        return w if w is not None and w.version == entry[2] else None


class PlacementRound:
    """One `form_batches` round: places requests on a fleet and collects the batches."""

    def __init__(self, fleet: Fleet, max_batch_size: int) -> None:
        self.fleet = fleet
        self.max_batch_size = max_batch_size
        self.batches: dict[tuple[str, int], Batch] = {}  # insertion order = creation order
        # Per bucket: (load, worker id) of workers holding a batch of it this round. Within a
        # round loads only grow, so an entry whose load is not the worker's current one is stale.
        self._holding: dict[int, list[tuple[float, str]]] = {}
        self._buckets_of: dict[str, list[int]] = {}

    def result(self) -> list[Batch]:
        return list(self.batches.values())

    def _fits(self, w: _Worker, r: PendingRequest, bucket: int) -> bool:
        if w.kv_free_tokens < r.kv_tokens:
            return False
        b = self.batches.get((w.worker_id, bucket))
        return b is None or len(b.requests) < self.max_batch_size

    def _least_loaded(self, r: PendingRequest, bucket: int) -> _Worker | None:
        return self._first_fitting(self.fleet._heap, self.fleet._valid, r, bucket)

    def _least_loaded_holding(self, r: PendingRequest, bucket: int) -> _Worker | None:
        heap = self._holding.get(bucket)
        if not heap:
            return None
        workers = self.fleet._workers

        def valid(entry: tuple) -> _Worker | None:
            w = workers.get(entry[1])
            return w if w is not None and w.load == entry[0] else None

        return self._first_fitting(heap, valid, r, bucket)

    def _first_fitting(
        self,
        heap: list,
        valid: Callable[[Any], _Worker | None],
        r: PendingRequest,
        bucket: int,
    ) -> _Worker | None:
        """Least-loaded worker in `heap` that fits r: stale entries (valid() is None) and full
        workers are dropped; entries that do not fit r are set aside and pushed back."""
        aside, found = [], None
        while heap:
            w = valid(heap[0])
            if w is None or w.free_slots < 1:
                heapq.heappop(heap)
            elif self._fits(w, r, bucket):
                found = w
                break
            else:
                aside.append(heapq.heappop(heap))
        for e in aside:
            heapq.heappush(heap, e)
        return found

    def _prefix_owner(self, r: PendingRequest, bucket: int, least: float) -> _Worker | None:
        """The first of the prefix's owners that fits and is within the imbalance bound of the
        least loaded fitting worker (cluster/prefix_affinity.py rules 1-2), if any."""
        if r.prefix_key is None:
            return None
        ring = self.fleet.affinity
        for wid in ring.owners(r.prefix_key):
            w = self.fleet._workers.get(wid)
            if w is not None and w.free_slots >= 1 and self._fits(w, r, bucket):
                if ring.within_bound(w.load, least):
                    return w
        return None

    def place(self, r: PendingRequest, bucket: int) -> bool:
        """Put `r` on the best fitting worker (charging the fleet); False when none fits."""
        best = self._least_loaded(r, bucket)
        if best is None:
            return False
        owner = self._prefix_owner(r, bucket, best.load)
        holder = None if owner is not None else self._least_loaded_holding(r, bucket)
        best = owner or best
        if holder is not None and holder is not best:
            # (load, holds a batch of the bucket first, id): the holder wins unless best is
            # strictly less loaded, or equally loaded, holding too and smaller by id.
            best_holds = (best.worker_id, bucket) in self.batches
            mine = (best.load, 0 if best_holds else 1, best.worker_id)
            if (holder.load, 0, holder.worker_id) < mine:
                best = holder
        key = (best.worker_id, bucket)
        batch = self.batches.get(key)
        if batch is None:
            batch = self.batches[key] = Batch(best.worker_id, bucket)
            self._buckets_of.setdefault(best.worker_id, []).append(bucket)
        batch.requests.append(r)
        self.fleet._change(best, -1, -r.kv_tokens)
        for b in self._buckets_of[best.worker_id]:
            heapq.heappush(self._holding.setdefault(b, []), (best.load, best.worker_id))
        return True
