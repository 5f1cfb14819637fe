"""Optional bearer-token auth (server interceptor) and TLS / mTLS credentials from files.

Health checks stay open so load balancers and Ray probes need no secret; everything else,
reflection included, needs `authorization: Bearer <token>` when a token is configured.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

HEALTH_PREFIX = "/grpc.health.v1.Health/"


@dataclass(frozen=True)
class TLSFiles:
    """PEM files. Set `client_ca_file` to require client certificates signed by it (mTLS)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    def __post_init__(self) -> None:
        for name in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(
                    f"TLSFiles.{name}={path!r} is not a readable file: pass a PEM file path"
                )

    def server_credentials(self) -> grpc.ServerCredentials:
        ca = Path(self.client_ca_file).read_bytes() if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )


def client_credentials(
    ca_file: str, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials:
    """Channel credentials trusting `ca_file`, presenting a client cert when given (mTLS)."""
    return grpc.ssl_channel_credentials(
        root_certificates=Path(ca_file).read_bytes(),
        private_key=Path(key_file).read_bytes() if key_file else None,
        certificate_chain=Path(cert_file).read_bytes() if cert_file else None,
    )


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying the bearer token (works on plaintext channels too)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("BearerTokenInterceptor token='' is invalid: pass a non-empty secret")
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if details.method.startswith(HEALTH_PREFIX):
            return await continuation(details)
        sent = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        if isinstance(sent, str) and hmac.compare_digest(sent.encode(), self._expected):
            return await continuation(details)
        handler = await continuation(details)
        if handler is None:
            return None
        reason = "missing authorization metadata" if sent is None else "invalid bearer token"
        return _denying(handler, f"{reason}: send 'authorization: Bearer <token>'")


def _denying(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    async def deny_unary(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def deny_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # unreachable: makes this an async generator, as streaming handlers must be

    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny_stream, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny_unary, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **kw)
    return grpc.unary_unary_rpc_method_handler(deny_unary, **kw)
