"""Following a request on the scheduler from an HTTP handler, and noticing the client leave.

A caller that goes away cancels its request (unless another caller attached to it through the
same request id), as the gRPC gateway does, so the worker frees the row at once. A caller that
named its request (X-Request-Id) gets a short grace first: a client retrying after a dropped
connection attaches to the running request instead of starting it over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from cluster.requests import Delta, RequestState
from cluster.scheduler import Scheduler


async def follow(
    sched: Scheduler, state: RequestState, grace_s: float = 0.0
) -> AsyncIterator[Delta]:
    """The request's deltas; leaving early (cancel, close) cancels it if nobody else waits,
    after `grace_s` seconds in which a retry with the same request id may attach instead."""
    inner = cast(AsyncGenerator[Delta, None], state.stream())  # an async generator
    done = False
    try:
        async for d in inner:
            done = d.finished
            yield d
    finally:
        await inner.aclose()  # drop our subscription first, so `subscribers` counts the others
        if not done:
            if grace_s > 0:
                asyncio.get_running_loop().call_later(grace_s, _orphaned, sched, state)
            else:
                _orphaned(sched, state)


def _orphaned(sched: Scheduler, state: RequestState) -> None:
    if not state.finished and not state.subscribers:
        sched.cancel(state.request_id)


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client closes the connection (after the body has been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(work: asyncio.Task[Any], receive: Receive) -> bool:
    """Wait for `work`; True if it finished, False if the client left first (work cancelled)."""
    watch = asyncio.ensure_future(wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (work, watch):
            if not t.done():
                t.cancel()
        await asyncio.gather(work, watch, return_exceptions=True)
    return work in done and not work.cancelled()


class SSEResponse(StreamingResponse):
    """Server-sent events that stop (closing the event source) the moment the client leaves.

    Starlette's StreamingResponse on ASGI 2.4 servers notices a gone client only when the next
    write fails; a request waiting in the queue writes nothing for a while, so here a watcher
    task listens for `http.disconnect` the whole time.
    """

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str], headers: dict[str, str]) -> None:
        super().__init__(content, headers={**headers, "cache-control": "no-cache"})
        self.events = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        work = asyncio.ensure_future(self.stream_response(send))
        try:
            await until_disconnect(work, receive)
        except OSError:
            pass  # the write that found the client gone
        finally:
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                await aclose()
