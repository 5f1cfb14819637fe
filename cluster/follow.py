"""Following a request on the scheduler, for the gRPC gateway and the HTTP servers alike.

A caller that goes away cancels its request (unless another caller attached to it through the
same request id), so the worker frees the row at once. A caller that named its request over
HTTP (X-Request-Id) gets a short grace first: a client retrying after a dropped connection
attaches to the running request instead of starting it over. A caller closes what it follows
deterministically (`contextlib.aclosing`): an async generator left to the garbage collector
runs its `finally` whenever a collection finds it, so the cancel could wait for seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

from cluster.requests import Delta, RequestState
from cluster.scheduler import Scheduler


async def follow(
    sched: Scheduler, state: RequestState, grace_s: float = 0.0
) -> AsyncGenerator[Delta, None]:
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
