"""Per-request state held by the scheduler, and the plain data it hands to callers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from cluster.tokenizer import IncrementalDetokenizer
from workers.types import SamplingParams

# Error codes carried to callers (gRPC status names; mapped to statuses in the gateway only).
INVALID_ARGUMENT = "INVALID_ARGUMENT"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
CANCELLED = "CANCELLED"
UNAVAILABLE = "UNAVAILABLE"
INTERNAL = "INTERNAL"


class SchedulerError(Exception):
    """A request the scheduler refuses or cannot finish; `code` is a gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class GenerateInput:
    """One request as callers submit it: exactly one of prompt / messages."""

    prompt: str | list[int] | None = None
    messages: list[dict[str, str]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str | None = None  # idempotency key; generated when None
    priority: int = 0  # higher runs first
    timeout_s: float | None = None  # relative deadline for the whole request


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    requeues: int = 0
    queue_time_s: float = 0.0


@dataclass(slots=True)
class Delta:
    """What a subscriber receives: new text and tokens; the last one has finished=True."""

    request_id: str
    text: str
    tokens: list[int]  # [num_new_tokens]
    finished: bool = False
    finish_reason: str | None = None
    error_code: str | None = None
    error: str | None = None
    usage: Usage | None = None
    logprobs: list[float] | None = None  # [num_new_tokens] when requested


class Subscriber(Protocol):
    def put_nowait(self, item: Delta, /) -> None: ...


class FinalWaiter:
    """A subscriber that wants only the last delta (unary calls): a future, no queue."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Delta]) -> None:
        self.future = future

    def put_nowait(self, item: Delta, /) -> None:
        if item.finished and not self.future.done():
            self.future.set_result(item)


@dataclass(slots=True)
class RequestState:
    request_id: str
    prompt: list[int]  # [num_prompt_tokens]
    params: SamplingParams
    priority: int
    arrival: float
    deadline: float | None
    detok: IncrementalDetokenizer | None
    tokens: list[int] = field(default_factory=list)  # committed output, each token once
    logprobs: list[float] = field(default_factory=list)  # [len(tokens)] when params.logprobs
    text: str = ""
    attempt: int = 0
    wire_id: str | None = None  # id of the current attempt on a worker
    worker_id: str | None = None
    kv_tokens: int = 0  # reserved on worker_id while in flight
    first_dispatch: float | None = None
    # Speculation counts of finished earlier attempts (the current attempt reports cumulative).
    base_draft: int = 0
    base_accepted: int = 0
    cur_draft: int = 0
    cur_accepted: int = 0
    requeues: int = 0
    finished: bool = False
    final: Delta | None = None
    subscribers: list[Subscriber] = field(default_factory=list)  # queues or FinalWaiters

    @property
    def remaining(self) -> int:
        return self.params.max_tokens - len(self.tokens)

    @property
    def committed_prefix(self) -> list[int]:
        """What a new attempt is prefilled with: the prompt and every token already emitted."""
        return self.prompt + self.tokens

    def usage(self) -> Usage:
        queue_time = 0.0 if self.first_dispatch is None else self.first_dispatch - self.arrival
        return Usage(
            prompt_tokens=len(self.prompt),
            completion_tokens=len(self.tokens),
            draft_tokens=self.base_draft + self.cur_draft,
            accepted_tokens=self.base_accepted + self.cur_accepted,
            requeues=self.requeues,
            queue_time_s=queue_time,
        )

    def publish(self, delta: Delta) -> None:
        for q in self.subscribers:
            q.put_nowait(delta)

    def catch_up(self) -> Delta:
        """Everything emitted so far, for a subscriber that attaches late (idempotent retry)."""
        if self.final is not None:
            return Delta(
                self.request_id,
                self.text,
                list(self.tokens),
                True,
                self.final.finish_reason,
                self.final.error_code,
                self.final.error,
                self.final.usage,
                self.lp(),
            )
        return Delta(self.request_id, self.text, list(self.tokens), logprobs=self.lp())

    def lp(self, new: list[float] | None = None) -> list[float] | None:
        """All (or the given new) log-probs, or None when the request did not ask for them."""
        if not self.params.logprobs:
            return None
        return list(self.logprobs if new is None else new)
