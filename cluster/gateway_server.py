"""`specfleet.v1.Gateway` over grpc.aio, on the scheduler's event loop. Maps scheduler error
codes to gRPC statuses (here only), serves health + reflection, optional bearer token / TLS
with the same options (and code) as the workers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import grpc

from cluster.follow import follow
from cluster.requests import Delta, GenerateInput, RequestState, SchedulerError
from cluster.scheduler import Scheduler
from contract.status import StatusCode
from protos import gateway_codec as codec
from protos.grpc_auth import BearerTokenInterceptor, TLSFiles
from protos.health import ServerHealth
from protos.specfleet.v1 import gateway_pb2 as pb
from protos.specfleet.v1 import gateway_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Gateway"].full_name
MAX_BATCH_ITEMS = 10_000


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    auth_token: str | None = None
    tls: TLSFiles | None = None
    max_receive_message_bytes: int = 16 * 1024 * 1024
    max_send_message_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if not (isinstance(self.port, int) and 0 <= self.port < 65536):
            raise ValueError(f"GatewayConfig.port={self.port!r}: use 0..65535 (0 = any free)")
        if self.auth_token == "":
            raise ValueError("GatewayConfig.auth_token='': pass None to disable auth")
        if self.max_receive_message_bytes <= 0 or self.max_send_message_bytes <= 0:
            raise ValueError("GatewayConfig message size limits must be > 0 bytes")


def _status(code: StatusCode | str) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, str(code), grpc.StatusCode.UNKNOWN)


class GatewayServicer(pb_grpc.GatewayServicer):
    def __init__(self, scheduler: Scheduler, info_extra: Callable[[], dict[str, str]]) -> None:
        self.sched = scheduler
        self.info_extra = info_extra

    def _admit(self, msg: pb.GenerateRequest, context: grpc.aio.ServicerContext) -> RequestState:
        inp = codec.request_from_pb(msg)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise SchedulerError(StatusCode.DEADLINE_EXCEEDED, "the call deadline has passed")
        if remaining is not None and (inp.timeout_s is None or remaining < inp.timeout_s):
            inp = GenerateInput(
                inp.prompt, inp.messages, inp.params, inp.request_id, inp.priority, remaining
            )
        return self.sched.submit(inp)

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateEvent]:
        try:
            state = self._admit(request, context)
        except SchedulerError as e:
            await context.abort(_status(e.code), e.message)
        # Closed here, not by the garbage collector: a caller that goes away cancels its request
        # at once (cluster/follow.py).
        async with aclosing(follow(self.sched, state)) as deltas:
            async for d in deltas:
                if d.error_code:
                    if d.tokens or d.text:
                        yield codec.event_to_pb(Delta(d.request_id, d.text, d.tokens))
                    await context.abort(_status(d.error_code), d.error or d.error_code)
                yield codec.event_to_pb(d)

    async def _finals(self, states: list[RequestState]) -> list[Delta]:
        """Wait for the last delta of each request (futures, not a task per request); a caller
        that goes away cancels its requests that nobody else waits for."""
        waiters = [s.final_waiter() for s in states]
        try:
            return await asyncio.gather(*(w.future for w in waiters))
        finally:
            for s, w in zip(states, waiters):
                w.future.cancel()  # a no-op once it has its result
                if w in s.subscribers:
                    s.subscribers.remove(w)
                if not s.finished and not s.subscribers:
                    self.sched.cancel(s.request_id)

    @staticmethod
    def _result(state: RequestState, last: Delta) -> pb.GenerateResult:
        if last.error_code:
            raise SchedulerError(last.error_code, last.error or last.error_code)
        return codec.result_to_pb(
            state.request_id, state.text, list(state.tokens), last, state.lp()
        )

    async def _run_one(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResult:
        state = self._admit(request, context)
        (last,) = await self._finals([state])
        return self._result(state, last)

    async def Submit(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResult:
        try:
            return await self._run_one(request, context)
        except SchedulerError as e:
            await context.abort(_status(e.code), e.message)
        raise AssertionError("unreachable")

    async def SubmitBatch(
        self, request: pb.SubmitBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitBatchResponse:
        if len(request.requests) > MAX_BATCH_ITEMS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"requests: {len(request.requests)} items is over {MAX_BATCH_ITEMS}; split it",
            )

        # Admit every item first (one scheduler round can then take them all), then wait.
        items: list[pb.BatchItem | None] = []
        admitted: list[tuple[int, RequestState]] = []
        for msg in request.requests:
            try:
                admitted.append((len(items), self._admit(msg, context)))
                items.append(None)
            except SchedulerError as e:
                items.append(_error_item(msg.request_id, e))
        finals = await self._finals([s for _, s in admitted])
        for (i, state), last in zip(admitted, finals):
            try:
                items[i] = pb.BatchItem(
                    request_id=state.request_id, result=self._result(state, last)
                )
            except SchedulerError as e:
                items[i] = _error_item(state.request_id, e)
        return pb.SubmitBatchResponse(items=[x for x in items if x is not None])  # all set

    async def Cancel(
        self, request: pb.CancelRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelResponse:
        return pb.CancelResponse(cancelled=[r for r in request.request_ids if self.sched.cancel(r)])

    async def ClusterInfo(
        self, request: pb.ClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterInfoResponse:
        s = self.sched
        resp = pb.ClusterInfoResponse(
            queue_depth=len(s.policy),
            max_queue=s.config.policy.max_queue,
            live_requests=len(s.live),
            metrics_url=self.info_extra().get("metrics_url", ""),
        )
        for wid, slot in s.workers.items():
            e = slot.status.engine if slot.status else None
            resp.workers.append(
                pb.WorkerStatus(
                    worker_id=wid,
                    address=slot.address,
                    metrics_url=slot.metrics_url,
                    connected=slot.connected,
                    state=slot.status.state if slot.status else "unknown",
                    model_id=e.model_id if e else "",
                    drafter=e.drafter if e else "",
                    max_batch_size=e.max_batch_size if e else 0,
                    kv_budget_tokens=e.kv_budget_tokens if e else 0,
                    inflight=len(slot.inflight),
                    connections=slot.connections,
                )
            )
            if e is not None:
                resp.model_id, resp.vocab_size, resp.max_context = (
                    e.model_id,
                    e.vocab_size,
                    e.max_context,
                )
        return resp


def _error_item(request_id: str, e: SchedulerError) -> pb.BatchItem:
    return pb.BatchItem(request_id=request_id, error=pb.Error(code=e.code, message=e.message))


def _handlers(servicer: GatewayServicer) -> grpc.GenericRpcHandler:
    def unary(cls: Any, fn: Any, resp: Any) -> grpc.RpcMethodHandler:
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                msg = codec.parse(cls, raw)
            except SchedulerError as e:
                await context.abort(_status(e.code), e.message)
            return await fn(msg, context)

        return grpc.unary_unary_rpc_method_handler(handle, response_serializer=resp)

    async def generate(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            msg = codec.parse(pb.GenerateRequest, raw)
        except SchedulerError as e:
            await context.abort(_status(e.code), e.message)
        async for ev in servicer.Generate(msg, context):
            yield ev

    ser = {
        name: getattr(pb, name).SerializeToString
        for name in (
            "GenerateEvent",
            "GenerateResult",
            "SubmitBatchResponse",
            "CancelResponse",
            "ClusterInfoResponse",
        )
    }
    handlers = {
        "Generate": grpc.unary_stream_rpc_method_handler(
            generate, response_serializer=ser["GenerateEvent"]
        ),
        "Submit": unary(pb.GenerateRequest, servicer.Submit, ser["GenerateResult"]),
        "SubmitBatch": unary(
            pb.SubmitBatchRequest, servicer.SubmitBatch, ser["SubmitBatchResponse"]
        ),
        "Cancel": unary(pb.CancelRequest, servicer.Cancel, ser["CancelResponse"]),
        "ClusterInfo": unary(
            pb.ClusterInfoRequest, servicer.ClusterInfo, ser["ClusterInfoResponse"]
        ),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


class GatewayServer:
    def __init__(
        self,
        scheduler: Scheduler,
        config: GatewayConfig | None = None,
        info_extra: Callable[[], dict[str, str]] = dict,
    ) -> None:
        self.config = config or GatewayConfig()
        self.scheduler = scheduler
        self.info_extra = info_extra
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._health: ServerHealth | None = None

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> GatewayServer:
        cfg = self.config
        interceptors = [BearerTokenInterceptor(cfg.auth_token)] if cfg.auth_token else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", cfg.max_receive_message_bytes),
                ("grpc.max_send_message_length", cfg.max_send_message_bytes),
            ],
        )
        server.add_generic_rpc_handlers(
            (_handlers(GatewayServicer(self.scheduler, self.info_extra)),)
        )
        self._health = ServerHealth(server, SERVICE_NAME)
        bind = f"{cfg.host}:{cfg.port}"
        if cfg.tls is not None:
            self.port = server.add_secure_port(bind, cfg.tls.server_credentials())
        else:
            self.port = server.add_insecure_port(bind)
        if self.port == 0:
            raise RuntimeError(f"gateway could not bind {bind}: is the port in use?")
        await server.start()
        self._server = server
        await self.set_serving(True)
        return self

    async def set_serving(self, serving: bool) -> None:
        assert self._health is not None
        await self._health.set_serving(serving)

    async def stop(self, grace: float = 5.0) -> None:
        if self._server is not None:
            await self.set_serving(False)
            await self._server.stop(grace)
