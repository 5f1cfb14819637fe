"""Prefix-aware placement: which workers a prompt prefix should go to (policy rule 5's first try).

A prompt's *prefix key* is a stable hash of its first `AFFINITY_TOKENS` tokens (the first
blocks of a worker's prefix cache, workers/prefix_cache.py); prompts shorter than that have
none and are placed by load alone. Keys map to workers through a consistent-hash ring with
`VNODES` virtual nodes per worker, so:

1. Affinity: a key's *owners* are the first distinct workers clockwise from it on the ring;
   every prompt with that prefix tries its first owner first, so its KV is cached once.
2. Bounded imbalance: an owner is taken only while its load is at most the least loaded
   fitting worker's plus `max_imbalance` (load = in-flight rows / slots). A busy first owner
   hands the prefix to its second owner (a hot prefix is then served by two workers, both
   warm), and past that the request goes to the least loaded worker as without affinity.
3. Re-homing: a worker that leaves takes only its own ring points with it, so only the keys it
   owned move (to their next owner) and every other key stays where its cache is; when it comes
   back its keys return. Nothing is lost either way: a miss only costs a prefill.

Pure code, no clock and no I/O; keys are blake2b hashes, so every scheduler process agrees.
Lookups cost O(log(workers x VNODES)).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from protos.packing import pack_u32

AFFINITY_TOKENS = 32  # the worker cache's default block: a key names a cacheable block
VNODES = 64  # ring points per worker: keys spread within a few percent of evenly
SPREAD = 2  # owners a key may use before falling back to the least loaded worker


def prefix_key(tokens: Sequence[int], num_tokens: int = AFFINITY_TOKENS) -> int | None:
    """A stable 64-bit key of the first `num_tokens` tokens, or None for a shorter prompt
    (it holds no full cached block, so no worker is better for it than another)."""
    if len(tokens) <= num_tokens:
        return None
    return _hash(pack_u32(list(tokens[:num_tokens])))


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class AffinityRing:
    def __init__(self, vnodes: int = VNODES, max_imbalance: float = 0.25) -> None:
        if vnodes < 1:
            raise ValueError(f"AffinityRing.vnodes={vnodes!r} is invalid: use an int >= 1")
        if not 0.0 <= max_imbalance <= 1.0:
            raise ValueError(
                f"AffinityRing.max_imbalance={max_imbalance!r} is invalid: use 0..1 (a fraction "
                "of a worker's slots)"
            )
        self.vnodes = vnodes
        self.max_imbalance = max_imbalance
        self._points: list[int] = []  # sorted ring positions
        self._owner: dict[int, str] = {}  # ring position -> worker id
        self._workers: set[str] = set()

    def __contains__(self, worker_id: str) -> bool:
        return worker_id in self._workers

    def __len__(self) -> int:
        return len(self._workers)

    def add(self, worker_id: str) -> None:
        if worker_id in self._workers:
            return
        self._workers.add(worker_id)
        for i in range(self.vnodes):
            p = _hash(f"{worker_id}#{i}".encode())
            if p not in self._owner:  # a 64-bit collision: the earlier worker keeps the point
                self._owner[p] = worker_id
                bisect.insort(self._points, p)

    def remove(self, worker_id: str) -> None:
        if worker_id not in self._workers:
            return
        self._workers.discard(worker_id)
        gone = {p for p, w in self._owner.items() if w == worker_id}
        self._points = [p for p in self._points if p not in gone]
        for p in gone:
            del self._owner[p]

    def owners(self, key: int, n: int = SPREAD) -> list[str]:
        """The first `n` distinct workers clockwise from `key`, in preference order."""
        out: list[str] = []
        if not self._points:
            return out
        i = bisect.bisect_left(self._points, key)
        for step in range(len(self._points)):
            w = self._owner[self._points[(i + step) % len(self._points)]]
            if w not in out:
                out.append(w)
                if len(out) == n or len(out) == len(self._workers):
                    break
        return out

    def within_bound(self, load: float, least_load: float) -> bool:
        """May an owner at `load` take the request when the least loaded fitting worker is at
        `least_load`? (rule 2; float sums are compared with a little slack)."""
        return load <= least_load + self.max_imbalance + 1e-9
