"""One session's outgoing items between the engine thread and its gRPC handler, bounded.

The engine never waits on the network (engine_loop.py), so a client that reads its stream
slower than the worker generates leaves events waiting here while the handler is blocked in
gRPC flow control. The backlog is bounded in tokens (an event without tokens counts as one).
Past the bound the session overflows, once: the waiting items are dropped, `on_overflow` runs
(the server aborts the session's requests, so the engine stops generating for it), and the
handler's next `take()` gets a RESOURCE_EXHAUSTED `WireError` naming the limit and the fix,
which ends the stream. What the client already received stays valid and nothing is sent twice:
its requests simply end unfinished, and a scheduler resumes them from what it committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from contract.status import StatusCode
from protos.worker_codec import RequestError, WireError
from workers.types import RequestOutput


class SessionOutbox:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,  # the handler's event loop
        max_tokens: int,  # WorkerServerConfig.max_session_backlog_tokens
        on_overflow: Callable[[], None],
    ) -> None:
        self._loop = loop
        self.max_tokens = max_tokens
        self._on_overflow = on_overflow
        self._queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self.backlog = 0  # tokens waiting in _queue
        self.overflowed = False

    def sink(self, items: object) -> None:
        """The engine thread's sink: hands over to the event loop, never blocks."""
        self._loop.call_soon_threadsafe(self.put, items)

    def put(self, item: object) -> None:
        """On the event loop: engine outputs, or the session's own control items."""
        if self.overflowed:
            return  # the stream is ending with RESOURCE_EXHAUSTED; later items have no reader
        weight = _tokens(item)
        if self.backlog + weight > self.max_tokens:
            self._overflow(self.backlog + weight)
            return
        self.backlog += weight
        self._queue.put_nowait((weight, item))

    async def take(self) -> list[object]:
        """Everything waiting (at least one item), oldest first."""
        batch = [await self._queue.get()]
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        self.backlog -= sum(w for w, _ in batch)
        return [item for _, item in batch]

    def _overflow(self, backlog: int) -> None:
        self.overflowed = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self.backlog = 0
        self._queue.put_nowait(
            (
                0,
                WireError(
                    StatusCode.RESOURCE_EXHAUSTED,
                    "session",
                    f"{backlog} tokens of events wait for this client, over "
                    f"max_session_backlog_tokens={self.max_tokens}: the client reads the stream "
                    "slower than the worker generates; its requests were aborted. Read events "
                    "as they come (or send fewer requests per session), or raise "
                    "WorkerServerConfig.max_session_backlog_tokens (--max-session-backlog-tokens)",
                ),
            )
        )
        self._on_overflow()


def _tokens(item: object) -> int:
    if not isinstance(item, list):
        return 0  # control items: half-close, stream errors
    return sum(
        max(1, len(x.new_tokens)) if isinstance(x, RequestOutput) else 1
        for x in item
        if isinstance(x, (RequestOutput, RequestError))
    )
