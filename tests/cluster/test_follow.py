"""A caller that stops following a request cancels it at once (cluster/follow.py), not whenever
the garbage collector finds the generators: grpc.aio closes a streaming handler whose client
went away, and the handler may be waiting at its own `yield` then, with what it follows
suspended at theirs. Here the gRPC gateway's real `Generate` is closed there, the collector
off, on a real scheduler with no worker (the request stays live until cancelled)."""

from __future__ import annotations

import asyncio
import gc

from cluster.gateway_server import GatewayServicer
from cluster.requests import Delta
from cluster.scheduler import Scheduler
from protos.specfleet.v1 import gateway_pb2 as pb


class Context:
    """What Generate asks of grpc.aio's ServicerContext before a delta (no call deadline)."""

    def time_remaining(self) -> None:
        return None


def test_a_generate_stream_closed_between_deltas_cancels_its_request_at_once() -> None:
    async def follow_then_leave() -> tuple[Scheduler, list]:
        sched = Scheduler()
        servicer = GatewayServicer(sched, dict)
        request = pb.GenerateRequest(request_id="r", prompt_token_ids=[1, 2, 3])
        stream = servicer.Generate(request, Context())  # type: ignore[arg-type]
        first = asyncio.ensure_future(stream.__anext__())
        for _ in range(10):  # until Generate subscribes and waits for a delta
            await asyncio.sleep(0)
        state = sched.live["r"]
        state.publish(Delta("r", "", [5]))
        await first  # Generate now waits at its yield, its follower at theirs
        await stream.aclose()  # the client went away
        return sched, list(state.subscribers)

    gc.disable()
    try:
        sched, subscribers = asyncio.run(follow_then_leave())
    finally:
        gc.enable()
    assert "r" not in sched.live, "the request stayed live after its only follower left"
    assert subscribers == [], "the follower's subscription outlived it"
