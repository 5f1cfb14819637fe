"""The worker's gRPC server: Session stream, Info, grpc.health.v1 and reflection.

A grpc.aio server runs on its own event-loop thread; the engine runs on the EngineLoop thread.
They meet only through the loop's command queue (handler -> engine) and non-blocking sinks
(engine -> `call_soon_threadsafe` -> a per-session, bounded SessionOutbox), so neither waits
on the other. Handlers take raw bytes (no generated deserializer) so malformed protobuf becomes
INVALID_ARGUMENT naming the message, not gRPC's generic INTERNAL.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from contract.status import StatusCode, WorkerState
from protos import worker_codec as codec
from protos.grpc_auth import BearerTokenInterceptor, TLSFiles
from protos.health import ServerHealth
from protos.specfleet.v1 import worker_pb2 as pb
from workers.service.engine_loop import EngineLike, EngineLoop, EngineLoopConfig, WorkerUnavailable
from workers.service.metrics import WorkerMetrics
from workers.service.outbox import SessionOutbox
from workers.service.stops import StopTokenizer, has_stop_strings, tokenize_stops

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Worker"].full_name  # "specfleet.v1.Worker"
_HALF_CLOSE = object()  # the client finished sending; end the stream once its requests finish


class _LocalErrors(list):
    """Errors for ids the session never handed to the engine (they must not clear `pending`)."""


@dataclass(frozen=True)
class WorkerServerConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; read WorkerServer.port
    metrics_port: int | None = 0  # Prometheus HTTP port; None disables it
    worker_id: str = ""  # default "<hostname>:<port>"
    model_name: str = "in-memory"  # the `model` metrics label
    max_receive_message_bytes: int = 16 * 1024 * 1024  # gRPC default is 4 MiB
    max_send_message_bytes: int = 64 * 1024 * 1024
    max_concurrent_sessions: int = 256
    # Tokens of events a session's client may leave unread (it reads slower than the worker
    # generates); past it the session's requests are aborted and its stream ends with
    # RESOURCE_EXHAUSTED (workers/service/outbox.py).
    max_session_backlog_tokens: int = 65536
    limits: codec.CodecLimits = field(default_factory=codec.CodecLimits)
    loop: EngineLoopConfig = field(default_factory=EngineLoopConfig)
    auth_token: str | None = None
    tls: TLSFiles | None = None
    drain_grace_s: float = 30.0

    def __post_init__(self) -> None:
        for name in (
            "max_receive_message_bytes",
            "max_send_message_bytes",
            "max_concurrent_sessions",
            "max_session_backlog_tokens",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"WorkerServerConfig.{name}={value!r} is invalid: pass an int > 0")
        for name in ("port", "metrics_port"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 <= value < 65536):
                raise ValueError(
                    f"WorkerServerConfig.{name}={value!r} is invalid: pass 0..65535 (0 = any free port)"
                )
        if self.auth_token == "":
            raise ValueError(
                "WorkerServerConfig.auth_token='' is invalid: pass None to disable auth"
            )
        if self.drain_grace_s < 0:
            raise ValueError(
                f"WorkerServerConfig.drain_grace_s={self.drain_grace_s!r} is invalid: pass >= 0"
            )


class WorkerServer:
    """Serve one engine. `start()` returns once the port is bound; the model loads behind it
    (health NOT_SERVING until loaded). `stop()` drains, then shuts down."""

    def __init__(
        self,
        engine_factory: Callable[[], EngineLike],
        config: WorkerServerConfig | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.config = config or WorkerServerConfig()
        self._factory = engine_factory
        self._on_fatal = on_fatal
        self.port = 0
        self.metrics_port: int | None = None
        self.worker_id = self.config.worker_id
        self.metrics: WorkerMetrics | None = None
        self.engine_loop: EngineLoop | None = None
        self._aloop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._aloop.run_forever, name="specfleet-grpc", daemon=True
        )
        self._server: grpc.aio.Server | None = None
        self._health: ServerHealth | None = None
        self._num_sessions = 0
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def metrics_address(self) -> str | None:
        return None if self.metrics_port is None else f"{self.config.host}:{self.metrics_port}"

    # ------------------------------------------------------------ lifecycle (any thread)

    def start(self, wait_ready: bool = False, timeout: float | None = None) -> WorkerServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start_grpc(), self._aloop).result()
        self.worker_id = self.config.worker_id or f"{socket.gethostname()}:{self.port}"
        self.metrics = WorkerMetrics(self.worker_id, self.config.model_name)
        if self.config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.config.host, self.config.metrics_port)
        self.engine_loop = EngineLoop(
            self._factory, self.config.loop, self.metrics, self._on_engine_state, self._fatal
        )
        self.engine_loop.start()
        if wait_ready and not self.engine_loop.wait_ready(timeout):
            raise RuntimeError(
                f"worker {self.worker_id} did not become ready: {self.engine_loop.fatal_error!r}"
            )
        return self

    def stop(self, grace: float | None = None) -> None:
        """Graceful: health NOT_SERVING, refuse new requests, let running ones finish (up to
        `grace` s), then close streams and stop the engine thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.drain_grace_s if grace is None else grace
        self._call(self._set_health(False))
        if self.engine_loop is not None:
            if not self.engine_loop.drain(grace):
                log.warning(
                    "worker %s: requests still running after %.1fs drain", self.worker_id, grace
                )
        if self._server is not None:
            self._call(self._server.stop(grace=min(grace, 1.0)))
        if self.engine_loop is not None:
            self.engine_loop.stop()
        if self.metrics is not None:
            self.metrics.close()
        self._aloop.call_soon_threadsafe(self._aloop.stop)
        self._thread.join(timeout=5)

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._aloop).result()  # type: ignore[arg-type]

    def _on_engine_state(self, state: WorkerState) -> None:
        if not self._stopped.is_set() or state == WorkerState.FAILED:
            serving = state == WorkerState.SERVING
            asyncio.run_coroutine_threadsafe(self._set_health(serving), self._aloop)

    def _fatal(self, error: BaseException) -> None:
        if self._on_fatal is not None:
            self._on_fatal(error)

    # ------------------------------------------------------------ event-loop thread

    async def _start_grpc(self) -> None:
        cfg = self.config
        interceptors = [BearerTokenInterceptor(cfg.auth_token)] if cfg.auth_token else []
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", cfg.max_receive_message_bytes),
                ("grpc.max_send_message_length", cfg.max_send_message_bytes),
                ("grpc.keepalive_time_ms", 20_000),  # find dead peers so their rows get freed
                ("grpc.keepalive_timeout_ms", 10_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ],
        )
        handlers = {
            "Session": grpc.stream_stream_rpc_method_handler(
                self._session, response_serializer=pb.SessionEvent.SerializeToString
            ),
            "Info": grpc.unary_unary_rpc_method_handler(
                self._info, response_serializer=pb.InfoResponse.SerializeToString
            ),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        self._health = ServerHealth(self._server, SERVICE_NAME)
        await self._set_health(False)
        bind = f"{cfg.host}:{cfg.port}"
        if cfg.tls is not None:
            self.port = self._server.add_secure_port(bind, cfg.tls.server_credentials())
        else:
            self.port = self._server.add_insecure_port(bind)
        if self.port == 0:
            raise RuntimeError(f"could not bind {bind}: is the port in use?")
        await self._server.start()

    async def _set_health(self, serving: bool) -> None:
        assert self._health is not None
        await self._health.set_serving(serving)

    async def _info(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.InfoResponse:
        try:
            codec.decode_info_request(raw)
        except codec.WireError as e:
            await context.abort(grpc.StatusCode[e.code.name], f"{e.field}: {e.message}")
        assert self.engine_loop is not None
        try:
            info = await asyncio.wait_for(asyncio.wrap_future(self.engine_loop.info()), timeout=30)
        except WorkerUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        return codec.encode_info(codec.WorkerInfo(self.worker_id, self.engine_loop.state, info))

    async def _session(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SessionEvent]:
        loop = self.engine_loop
        assert loop is not None
        if loop.state != WorkerState.SERVING:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"worker is {loop.state}; retry later or elsewhere"
            )
        if self._num_sessions >= self.config.max_concurrent_sessions:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"max_concurrent_sessions={self.config.max_concurrent_sessions} reached; reuse a session",
            )
        session_id = 0

        def overflow() -> None:  # the client fell behind: stop generating for this session
            log.warning("session %s: client fell behind; aborting its requests", session_id)
            loop.close_session(session_id)

        outbox = SessionOutbox(
            asyncio.get_running_loop(), self.config.max_session_backlog_tokens, overflow
        )
        session_id = loop.open_session(outbox.sink)
        pending: set[str] = set()  # client ids submitted and not yet finished
        reader = asyncio.ensure_future(self._read(requests, session_id, outbox, pending))
        self._num_sessions += 1
        try:
            half_closed = False
            while not (half_closed and not pending):
                items = await outbox.take()
                events: list = []
                for item in items:
                    if item is _HALF_CLOSE:
                        half_closed = True
                    elif isinstance(item, codec.WireError):
                        await context.abort(
                            grpc.StatusCode[item.code.name], f"{item.field}: {item.message}"
                        )
                    elif isinstance(item, BaseException):
                        await context.abort(
                            grpc.StatusCode.UNAVAILABLE, f"worker engine failed: {item!r}"
                        )
                    elif isinstance(item, _LocalErrors):
                        events.extend(item)
                    else:
                        for ev in item:  # type: ignore[attr-defined]
                            if isinstance(ev, codec.RequestError) or ev.finished:
                                pending.discard(ev.request_id)
                        events.extend(item)  # type: ignore[arg-type]
                if events:
                    yield codec.encode_events(events)
        finally:
            reader.cancel()
            loop.close_session(session_id)
            self._num_sessions -= 1

    async def _read(
        self,
        requests: AsyncIterator[bytes],
        session_id: int,
        outbox: SessionOutbox,
        pending: set[str],
    ) -> None:
        loop = self.engine_loop
        assert loop is not None
        try:
            async for raw in requests:
                if outbox.overflowed:
                    return  # the stream is ending: take no more work for it
                try:
                    batch = codec.decode_batch(raw, self.config.limits)
                except codec.WireError as e:
                    outbox.put(e)
                    return
                local = _LocalErrors(batch.errors)
                fresh = []
                for req in batch.submit:
                    if req.request_id in pending:
                        local.append(
                            codec.RequestError(
                                req.request_id,
                                StatusCode.INVALID_ARGUMENT,
                                "id",
                                f"request id {req.request_id!r} is already running on this session",
                            )
                        )
                        continue
                    pending.add(req.request_id)
                    fresh.append(req)
                tokenizer = getattr(loop.engine, "tokenizer", None)
                if tokenizer is not None and any(has_stop_strings(r.params) for r in fresh):
                    # Off the engine thread and off this event loop (other sessions' events).
                    fresh = await asyncio.to_thread(_tokenize_stops, tokenizer, fresh, local)
                    pending.difference_update(e.request_id for e in local)
                loop.submit(session_id, fresh)  # before aborts, so "submit X, abort X" aborts X
                loop.abort(session_id, [rid for rid in batch.abort if rid in pending])
                if local:
                    outbox.put(local)
            outbox.put(_HALF_CLOSE)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the request stream broke; the handler's finally aborts our rows
            log.debug("session %s read failed: %r", session_id, e)
            outbox.put(
                codec.WireError(
                    StatusCode.UNAVAILABLE, "SessionRequest", f"request stream failed: {e!r}"
                )
            )


def _tokenize_stops(
    tokenizer: StopTokenizer, requests: list[codec.SubmitRequest], errors: list
) -> list[codec.SubmitRequest]:
    """Requests with token-id stops only; one whose stops cannot be encoded is refused alone."""
    out = []
    for req in requests:
        try:
            params = tokenize_stops(tokenizer, req.params)
        except Exception as e:  # a tokenizer error is this request's problem only
            errors.append(
                codec.RequestError(
                    req.request_id,
                    StatusCode.INVALID_ARGUMENT,
                    "params.stop",
                    f"cannot encode: {e}",
                )
            )
            continue
        out.append(codec.SubmitRequest(req.request_id, req.prompt, params))
    return out
