"""A small synchronous client for one worker (tests, CLI smoke checks, direct callers).

The scheduler may use it or only the codec; either way no mlx is imported.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import worker_codec as codec
from protos.grpc_auth import auth_metadata
from protos.specfleet.v1 import worker_pb2 as pb
from protos.specfleet.v1 import worker_pb2_grpc as pb_grpc
from workers.types import RequestOutput, SamplingParams

_END = object()


@dataclass
class Result:
    """One request's accumulated stream."""

    tokens: list[int] = field(default_factory=list)
    finish: RequestOutput | None = None
    error: codec.RequestError | None = None


class Session:
    """A live Session stream: `send()` batches, iterate `events()`, `close()` to half-close."""

    def __init__(self, stub: pb_grpc.WorkerStub, metadata: tuple, timeout: float | None) -> None:
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.call = stub.Session(self._requests(), metadata=metadata, timeout=timeout)

    def _requests(self) -> Iterator[pb.SessionRequest]:
        while (item := self._outbox.get()) is not _END:
            yield item  # type: ignore[misc]

    def send(self, submit: list[codec.SubmitRequest] = (), abort: list[str] = ()) -> None:  # type: ignore[assignment]
        self._outbox.put(codec.encode_batch(list(submit), list(abort)))

    def close(self) -> None:
        self._outbox.put(_END)

    def cancel(self) -> None:
        self.call.cancel()

    def events(self) -> Iterator[RequestOutput | codec.RequestError]:
        for msg in self.call:
            yield from codec.decode_events(msg)

    def collect(self, request_ids: set[str]) -> dict[str, Result]:
        """Read events until every id in `request_ids` finished or errored."""
        results = {rid: Result() for rid in request_ids}
        left = set(request_ids)
        for ev in self.events():
            res = results.setdefault(ev.request_id, Result())
            if isinstance(ev, codec.RequestError):
                res.error = ev
                left.discard(ev.request_id)
            else:
                res.tokens += ev.new_tokens
                if ev.finished:
                    res.finish = ev
                    left.discard(ev.request_id)
            if not left:
                break
        return results


class WorkerClient:
    def __init__(
        self,
        address: str,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        if credentials is not None:
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        self.metadata = auth_metadata(token)
        self.stub = pb_grpc.WorkerStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def info(self, timeout: float = 10.0) -> codec.WorkerInfo:
        return codec.decode_info(
            self.stub.Info(pb.InfoRequest(), metadata=self.metadata, timeout=timeout)
        )

    def health(self, service: str = "", timeout: float = 5.0) -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout).status

    def session(self, timeout: float | None = None) -> Session:
        return Session(self.stub, self.metadata, timeout)

    def generate(
        self,
        prompts: dict[str, list[int]],
        params: SamplingParams | None = None,
        timeout: float | None = 120.0,
    ) -> dict[str, Result]:
        """Submit every prompt on one session, half-close, and collect the streams."""
        params = params or SamplingParams()
        s = self.session(timeout)
        s.send([codec.SubmitRequest(rid, p, params) for rid, p in prompts.items()])
        s.close()
        return s.collect(set(prompts))
