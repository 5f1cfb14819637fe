"""Per-request state held by the scheduler. The plain data it takes from and hands to callers
(GenerateInput, Delta, Usage, SchedulerError) is the shared contract's (contract/requests.py),
re-exported here under the names the scheduler uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from contract.requests import Delta, GenerateInput, SchedulerError, Usage
from contract.status import StatusCode
from contract.types import SamplingParams

if TYPE_CHECKING:  # the client imports this module and must not need `tokenizers`
    from cluster.tokenizer import IncrementalDetokenizer

# Status names as the scheduler writes them (one enum: contract/status.py).
INVALID_ARGUMENT = StatusCode.INVALID_ARGUMENT
RESOURCE_EXHAUSTED = StatusCode.RESOURCE_EXHAUSTED
DEADLINE_EXCEEDED = StatusCode.DEADLINE_EXCEEDED
CANCELLED = StatusCode.CANCELLED
UNAVAILABLE = StatusCode.UNAVAILABLE
INTERNAL = StatusCode.INTERNAL

__all__ = [
    "Delta",
    "FinalWaiter",
    "GenerateInput",
    "RequestState",
    "SchedulerError",
    "StatusCode",
    "Subscriber",
    "Usage",
]


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
    cur_cached: int = 0  # prompt tokens the current attempt's worker had cached
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
            # The last attempt's hits, of the original prompt (a retry's prompt holds the output).
            cached_tokens=min(self.cur_cached, len(self.prompt)),
        )

    def finish(
        self,
        reason: str,
        code: str | None,
        message: str | None,
        last_tokens: list[int],
        last_text: str,
    ) -> None:
        """End the request: its last delta carries `last_tokens` (already in `tokens`), their
        text and the detokenizer's tail, and goes to every subscriber."""
        tail = self.detok.flush() if self.detok else ""
        self.text += tail
        self.finished = True
        self.final = Delta(
            self.request_id,
            last_text + tail,
            list(last_tokens),
            True,
            reason,
            code,
            message,
            self.usage(),
            self.lp(self.logprobs[len(self.tokens) - len(last_tokens) :]),
        )
        self.publish(self.final)

    async def stream(self) -> AsyncIterator[Delta]:
        """Deltas from the request's start (a late subscriber gets a catch-up first)."""
        q: asyncio.Queue[Delta] = asyncio.Queue()
        first = self.catch_up()
        if first.finished:
            yield first
            return
        self.subscribers.append(q)
        try:
            if first.tokens:
                yield first
            while True:
                d = await q.get()
                yield d
                if d.finished:
                    return
        finally:
            self.subscribers.remove(q)

    def final_waiter(self) -> FinalWaiter:
        """Subscribe to the last delta only (cheaper than `stream` for unary calls); the caller
        removes the waiter from `subscribers` when it stops waiting."""
        waiter = FinalWaiter(asyncio.get_running_loop().create_future())
        if self.final is not None:
            waiter.future.set_result(self.final)
        else:
            self.subscribers.append(waiter)
        return waiter

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
