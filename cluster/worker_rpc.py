"""One gRPC session per worker: connect (Info, then the Session stream), pump batches out and
events in, and reconnect after any failure. Failures are reported to the scheduler, which
requeues what was in flight; the link then resolves the worker's address again (a worker
restarted by Ray comes back on a new port) and reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from cluster.scheduler import Scheduler
from contract.status import WorkerState
from protos.grpc_auth import auth_metadata, client_credentials
from protos.specfleet.v1 import worker_pb2 as pb
from protos.specfleet.v1 import worker_pb2_grpc as pb_grpc
from protos.worker_codec import SubmitRequest, WireError, decode_events, decode_info, encode_batch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LinkConfig:
    auth_token: str | None = None
    tls_ca_file: str | None = None  # trust this CA (TLS); with cert/key: mTLS
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    max_message_bytes: int = 64 * 1024 * 1024
    reconnect_s: float = 0.25
    info_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.reconnect_s <= 0 or self.info_timeout_s <= 0:
            raise ValueError(
                f"LinkConfig reconnect_s={self.reconnect_s!r} / info_timeout_s="
                f"{self.info_timeout_s!r}: use values > 0"
            )
        if self.auth_token == "":
            raise ValueError("LinkConfig.auth_token='': pass None to disable auth")

    def channel(self, address: str) -> grpc.aio.Channel:
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
        ]
        if self.tls_ca_file:
            creds = client_credentials(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
            return grpc.aio.secure_channel(address, creds, options=options)
        return grpc.aio.insecure_channel(address, options=options)


class GrpcWorkerLink:
    def __init__(
        self,
        worker_id: str,
        resolve: Callable[[], Awaitable[str]],
        scheduler: Scheduler,
        config: LinkConfig | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.resolve = resolve
        self.scheduler = scheduler
        self.config = config or LinkConfig()
        self.address = ""
        self._outbox: asyncio.Queue[pb.SessionRequest | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._breaking = False
        self._stopping = False

    def send(self, submit: list[SubmitRequest], abort: list[str]) -> None:
        if self._outbox is None:
            # Not connected: the scheduler only dispatches to connected workers, so this is a
            # race with a disconnect that is about to requeue these requests anyway.
            return
        self._outbox.put_nowait(encode_batch(submit, abort))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def break_stream(self) -> None:
        """Cancel the current session (tests and operators: forces a requeue + reconnect)."""
        if self._call is not None:
            self._breaking = True
            self._call.cancel()

    async def _run(self) -> None:
        metadata = auth_metadata(self.config.auth_token)
        while not self._stopping:
            connected = False
            channel: grpc.aio.Channel | None = None
            writer: asyncio.Task[None] | None = None
            try:
                self.address = await self.resolve()
                channel = self.config.channel(self.address)
                stub = pb_grpc.WorkerStub(channel)
                status = decode_info(
                    await stub.Info(
                        pb.InfoRequest(), metadata=metadata, timeout=self.config.info_timeout_s
                    )
                )
                if status.state != WorkerState.SERVING:
                    raise ConnectionError(f"worker state is {status.state!r}")
                outbox: asyncio.Queue[pb.SessionRequest | None] = asyncio.Queue()
                # The link writes with call.write() from a task it owns and ends: a request
                # iterator handed to grpc.aio would be left awaiting its queue on every
                # reconnect ("Task was destroyed but it is pending", issue 13 defect 10).
                call = stub.Session(metadata=metadata)
                self._call = call
                writer = asyncio.get_running_loop().create_task(_write(call, outbox))
                self._outbox = outbox
                self.scheduler.worker_connected(self.worker_id, status, self.address)
                connected = True
                async for msg in self._call:
                    self.scheduler.worker_events(self.worker_id, decode_events(msg))
                reason = "session ended by the worker"
            except asyncio.CancelledError:
                if self._stopping or not self._breaking:  # the link itself is being stopped
                    reason = "link stopped"
                    raise
                # grpc.aio raises CancelledError from a locally cancelled call: a broken stream.
                self._breaking = False
                reason = "session cancelled locally"
            except (grpc.aio.AioRpcError, WireError, ConnectionError, OSError) as e:
                reason = _describe(e)
            except Exception as e:  # resolve() may raise anything (Ray actor errors, ...)
                reason = f"{type(e).__name__}: {e}"
            finally:
                self._outbox, self._call = None, None
                if writer is not None:
                    writer.cancel()
                    await asyncio.gather(writer, return_exceptions=True)
                if connected:
                    self.scheduler.worker_disconnected(self.worker_id, reason)
                if channel is not None:
                    await channel.close(grace=None)
            log.info("worker %s link down (%s); reconnecting", self.worker_id, reason)
            await asyncio.sleep(self.config.reconnect_s)


async def _write(
    call: grpc.aio.StreamStreamCall, q: asyncio.Queue[pb.SessionRequest | None]
) -> None:
    """Send queued messages until None (half-close) or the call ends (its reader reports why)."""
    try:
        while (item := await q.get()) is not None:
            await call.write(item)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
        return


def _describe(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"
