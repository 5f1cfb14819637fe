"""The plain data the batch policy works on: configuration, waiting requests, worker
capacity, batches, and the length buckets. Shared by cluster/policy.py and cluster/fleet.py."""

from __future__ import annotations

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


@dataclass(slots=True)
class PendingRequest:
    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    arrival: float
    priority: int = 0
    deadline: float | None = None  # absolute, same clock as `now`
    # Hash of the prompt's first tokens (cluster/prefix_affinity.py): placement tries the
    # workers whose prefix caches most likely hold it. None: placed by load alone.
    prefix_key: int | None = None

    @property
    def kv_tokens(self) -> int:
        """Worst-case KV footprint on a worker: every prompt and generated position."""
        return self.num_prompt_tokens + self.max_tokens


@dataclass(slots=True)
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


@dataclass(slots=True)
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
        if len(self.requests) <= 1:
            return 0.0  # one row pads nothing (and on a big fleet most batches are one row)
        padded = self.num_padded_tokens
        return 0.0 if padded == 0 else 1.0 - self.num_real_tokens / padded


def bucket_of(num_prompt_tokens: int, min_bucket: int) -> int:
    """Upper edge of the power-of-two bucket holding this prompt length."""
    if num_prompt_tokens <= min_bucket:
        return min_bucket
    return min_bucket * 2 ** math.ceil(math.log2(num_prompt_tokens / min_bucket))
