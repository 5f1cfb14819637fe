"""The scheduler's configuration and what it keeps per worker (split from cluster/scheduler.py,
which re-exports these names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cluster.policy import PolicyConfig
from cluster.policy import WorkerCapacity as Capacity
from cluster.worker_codec import WorkerStatus, WorkerSubmit

MAX_ATTEMPTS = 32  # dispatches of one request before it fails with UNAVAILABLE


class WorkerLink(Protocol):
    worker_id: str

    def send(self, submit: list[WorkerSubmit], abort: list[str]) -> None:
        """Queue one session message; never blocks. A broken link reports a disconnect."""


@dataclass(frozen=True)
class SchedulerConfig:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    finished_cache_size: int = 10_000  # finished requests kept for idempotent retries
    # A dispatch pass that raises is retried after 10 ms and counted in
    # specfleet_scheduler_tick_failures; this many failures in a row is a bug that will not go
    # away: the scheduler fails fast (every live request ends with UNAVAILABLE, new ones are
    # refused, `on_fatal` runs) instead of retrying forever.
    max_tick_failures: int = 20

    def __post_init__(self) -> None:
        if self.finished_cache_size < 0:
            raise ValueError(
                f"SchedulerConfig.finished_cache_size={self.finished_cache_size!r}: use >= 0"
            )
        if self.max_tick_failures < 1:
            raise ValueError(
                f"SchedulerConfig.max_tick_failures={self.max_tick_failures!r}: use >= 1"
            )


@dataclass
class WorkerSlot:
    link: WorkerLink
    status: WorkerStatus | None = None
    connected: bool = False
    connections: int = 0
    inflight: dict[str, str] = field(default_factory=dict)  # wire id -> request id
    kv_inflight: int = 0
    address: str = ""
    metrics_url: str = ""

    def capacity(self) -> Capacity | None:
        if not self.connected or self.status is None or self.status.state != "serving":
            return None
        e = self.status.engine
        return Capacity(
            worker_id=self.link.worker_id,
            free_slots=e.max_batch_size - len(self.inflight),
            kv_free_tokens=e.kv_budget_tokens - self.kv_inflight,
            num_inflight=len(self.inflight),
            max_slots=e.max_batch_size,
        )
