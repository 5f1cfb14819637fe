"""`from cluster import Client`: the Python client of a specfleet cluster (over the gateway).

    client = Client("127.0.0.1:50051")            # or Client.from_ray() inside the Ray cluster
    out = client.generate("Once upon a time", max_tokens=32)
    for delta in client.stream([{"role": "user", "content": "hi"}], temperature=0.7, seed=1):
        print(delta.text, end="")
    outs = client.generate_batch(["a", "b"], max_tokens=8)

Errors arrive as `SpecfleetError` (subclasses per status) carrying the server's message.

Retries: UNAVAILABLE (gateway down, e.g. while Ray restarts the scheduler) is retried for up to
`retry_timeout_s` with the same request id, which makes the retry idempotent. A stream that
already delivered tokens resumes only for deterministic requests (greedy, or seeded sampling):
the re-run produces the same tokens, and the ones already delivered are skipped.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from contract.requests import Delta, GenerateInput, SchedulerError, Usage
from contract.status import StatusCode
from contract.types import SamplingParams
from protos import gateway_codec as codec
from protos.grpc_auth import auth_metadata, client_credentials
from protos.specfleet.v1 import gateway_pb2 as pb
from protos.specfleet.v1 import gateway_pb2_grpc as pb_grpc

Prompt = str | Sequence[int] | Sequence[dict[str, str]]


class SpecfleetError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class InvalidRequestError(SpecfleetError):
    pass


class QueueFullError(SpecfleetError):
    """RESOURCE_EXHAUSTED: the cluster's waiting queue is full; retry later."""


class Unavailable(SpecfleetError):
    pass


class PlaintextToTLSError(Unavailable):
    """UNAVAILABLE that retrying cannot fix: the gateway speaks TLS, this client does not."""


_ERRORS: dict[str, type[SpecfleetError]] = {
    StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    StatusCode.RESOURCE_EXHAUSTED: QueueFullError,
    StatusCode.UNAVAILABLE: Unavailable,
}
UNAVAILABLE = StatusCode.UNAVAILABLE


def _error(code: str, message: str) -> SpecfleetError:
    return _ERRORS.get(code, SpecfleetError)(code, message)


@dataclass
class CompletionResult:
    request_id: str
    text: str
    tokens: list[int]
    finish_reason: str
    usage: Usage = field(default_factory=Usage)
    logprobs: list[float] | None = None  # [len(tokens)] when requested with logprobs=True


def make_input(
    prompt: Prompt,
    *,
    request_id: str | None = None,
    priority: int = 0,
    timeout_s: float | None = None,
    **sampling: Any,
) -> GenerateInput:
    params = sampling.pop("params", None) or SamplingParams(**sampling)
    if isinstance(prompt, str):
        return GenerateInput(prompt, None, params, request_id, priority, timeout_s)
    items = list(prompt)
    if items and all(isinstance(m, dict) for m in items):
        return GenerateInput(None, items, params, request_id, priority, timeout_s)  # type: ignore[arg-type]
    if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return GenerateInput(items, None, params, request_id, priority, timeout_s)  # type: ignore[arg-type]
    raise TypeError(
        f"prompt={prompt!r:.60}: pass a string, a list of token ids or a list of "
        "{'role', 'content'} messages"
    )


class Client:
    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
        retry_timeout_s: float = 60.0,
    ) -> None:
        self.retry_timeout_s = retry_timeout_s
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        if tls_ca_file:
            creds = client_credentials(tls_ca_file, tls_cert_file, tls_key_file)
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = pb_grpc.GatewayStub(self._channel)
        self._md = auth_metadata(token)
        self.address = address
        # A plaintext channel: on its first UNAVAILABLE, check whether the gateway speaks TLS.
        self._speaks_tls: bool | None = False if tls_ca_file else None

    @classmethod
    def from_ray(cls, name: str = "specfleet-scheduler", namespace: str = "specfleet", **kw: Any):
        """Connect to the gateway of the scheduler actor in the current Ray cluster."""
        from cluster.ray_actor import gateway_address

        return cls(gateway_address(name, namespace), **kw)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls --------------------------------------------------------------------------------
    def generate(
        self, prompt: Prompt, *, timeout: float | None = None, **kw: Any
    ) -> CompletionResult:
        msg = self._request(prompt, kw)
        res = self._retrying(lambda: self._stub.Submit(msg, metadata=self._md, timeout=timeout))
        return _result(res)

    def stream(self, prompt: Prompt, *, timeout: float | None = None, **kw: Any) -> Iterator[Delta]:
        msg = self._request(prompt, kw)
        deterministic = (
            not msg.sampling.HasField("temperature")
            or msg.sampling.temperature == 0
            or msg.sampling.HasField("seed")
        )
        got_tokens, got_chars = 0, 0
        give_up = time.monotonic() + self.retry_timeout_s
        delay = 0.25
        while True:
            skip_tokens, skip_chars = got_tokens, got_chars  # already delivered: drop on replay
            call = self._stub.Generate(msg, metadata=self._md, timeout=timeout)
            try:
                for ev in call:
                    d = codec.event_from_pb(ev)
                    if skip_tokens or skip_chars:
                        n, c = min(skip_tokens, len(d.tokens)), min(skip_chars, len(d.text))
                        skip_tokens, skip_chars = skip_tokens - n, skip_chars - c
                        d.tokens, d.text = d.tokens[n:], d.text[c:]
                        if not (d.tokens or d.text or d.finished):
                            continue
                    got_tokens += len(d.tokens)
                    got_chars += len(d.text)
                    yield d
                return
            except grpc.RpcError as e:
                err = self._explain(_from_rpc(e))
                resumable = got_tokens == 0 or deterministic
                retry = err.code == UNAVAILABLE and not isinstance(err, PlaintextToTLSError)
                if not retry or not resumable or time.monotonic() > give_up:
                    raise err from None
            finally:
                call.cancel()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        give_up = time.monotonic() + self.retry_timeout_s
        delay = 0.25
        while True:
            try:
                return fn()
            except grpc.RpcError as e:
                err = self._explain(_from_rpc(e))
                retry = err.code == UNAVAILABLE and not isinstance(err, PlaintextToTLSError)
                if not retry or time.monotonic() > give_up:
                    raise err from None
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _explain(self, err: SpecfleetError) -> SpecfleetError:
        """A plaintext client at a TLS gateway only ever sees UNAVAILABLE "Socket closed": on
        the first UNAVAILABLE, probe the address for TLS and, if it speaks it, fail now with
        the fix instead of retrying."""
        if err.code != UNAVAILABLE or self._speaks_tls is False:
            return err
        if self._speaks_tls is None:
            if not _speaks_tls(self.address):  # down or plaintext: probe again next time
                return err
            self._speaks_tls = True
        return PlaintextToTLSError(
            UNAVAILABLE,
            f"{err.message}; the gateway at {self.address} speaks TLS and this client "
            "connected in plaintext: pass tls_ca_file=<CA PEM> (CLI: --tls-ca)",
        )

    def generate_batch(
        self,
        prompts: Sequence[Prompt | GenerateInput],
        *,
        timeout: float | None = None,
        return_exceptions: bool = False,
        **kw: Any,
    ) -> list[CompletionResult | SpecfleetError]:
        """All prompts in one call; per-item errors raise (or are returned in place). An item
        may be a whole `GenerateInput` (its own params, priority, request id); `kw` then does
        not apply to it."""
        req = pb.SubmitBatchRequest(requests=[self._request(p, dict(kw)) for p in prompts])
        resp = self._retrying(
            lambda: self._stub.SubmitBatch(req, metadata=self._md, timeout=timeout)
        )
        out: list[CompletionResult | SpecfleetError] = []
        for item in resp.items:
            if item.HasField("error"):
                err = _error(item.error.code, item.error.message)
                if not return_exceptions:
                    raise err
                out.append(err)
            else:
                out.append(_result(item.result))
        return out

    def cancel(self, *request_ids: str) -> list[str]:
        try:
            resp = self._stub.Cancel(
                pb.CancelRequest(request_ids=list(request_ids)), metadata=self._md
            )
        except grpc.RpcError as e:
            raise _from_rpc(e) from None
        return list(resp.cancelled)

    def cluster_info(self) -> pb.ClusterInfoResponse:
        try:
            return self._stub.ClusterInfo(pb.ClusterInfoRequest(), metadata=self._md, timeout=10)
        except grpc.RpcError as e:
            raise _from_rpc(e) from None

    def _request(self, prompt: Prompt | GenerateInput, kw: dict[str, Any]) -> pb.GenerateRequest:
        # Always send an id: it is what makes a retry attach instead of running twice.
        kw.setdefault("request_id", None)
        kw["request_id"] = kw["request_id"] or f"req-{uuid.uuid4().hex}"
        try:
            if isinstance(prompt, GenerateInput):
                if prompt.request_id is None:
                    prompt = dataclasses.replace(prompt, request_id=kw["request_id"])
                return codec.request_to_pb(prompt)
            inp = make_input(prompt, **kw)
            return codec.request_to_pb(inp)
        except (SchedulerError, ValueError) as e:
            raise InvalidRequestError(StatusCode.INVALID_ARGUMENT, str(e)) from None


def _result(res: pb.GenerateResult) -> CompletionResult:
    tokens, logprobs = codec.result_tokens(res)
    return CompletionResult(
        request_id=res.request_id,
        text=res.text,
        tokens=tokens,
        finish_reason=res.finish_reason,
        usage=codec.usage_from_pb(res.usage),
        logprobs=logprobs,
    )


def _speaks_tls(address: str, timeout_s: float = 2.0) -> bool:
    """Whether a TLS handshake with `address` ("host:port") gets a TLS answer."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # only asking "is it TLS?"
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout_s) as sock:
            with ctx.wrap_socket(sock, server_hostname=host or None):
                return True
    except ssl.SSLError as e:  # a TLS alert (e.g. "certificate required") is still TLS
        return "ALERT" in str(e).upper()
    except (OSError, ValueError):
        return False


def _from_rpc(e: grpc.RpcError) -> SpecfleetError:
    code = e.code().name if hasattr(e, "code") else "UNKNOWN"  # type: ignore[attr-defined]
    details = e.details() if hasattr(e, "details") else str(e)  # type: ignore[attr-defined]
    return _error(code, details or code)


__all__ = [
    "Client",
    "CompletionResult",
    "InvalidRequestError",
    "PlaintextToTLSError",
    "QueueFullError",
    "SpecfleetError",
    "Unavailable",
]
