"""Streaming a request's deltas from an HTTP handler (`cluster.follow`), and noticing the
client leave."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


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
