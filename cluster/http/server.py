"""The HTTP server: uvicorn serving the Starlette app on the scheduler's own event loop.

Same loop as the scheduler and the gRPC gateway, so handlers call `Scheduler.submit` directly
(the scheduler is single-loop, not thread-safe). The socket is bound here, so a port in use
fails with a clear error and port 0 reports the port it got; uvicorn's own `serve()` is not
used because it would install signal handlers and exit the process on a bind error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from cluster.http.app import AppLimits, HttpApi
from cluster.scheduler import Scheduler
from protos.grpc_auth import TLSFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    auth_token: str | None = None  # the gRPC gateway's bearer token
    tls: TLSFiles | None = None  # same certificate as the gRPC gateway
    max_body_bytes: int = 16 * 1024 * 1024
    retry_grace_s: float = 5.0  # a request sent with X-Request-Id outlives its client this long
    model_name: str = ""  # accepted as `model` besides the workers' own model ids

    def __post_init__(self) -> None:
        if not (isinstance(self.port, int) and 0 <= self.port < 65536):
            raise ValueError(f"HttpConfig.port={self.port!r}: use 0..65535 (0 = any free)")
        if self.auth_token == "":
            raise ValueError("HttpConfig.auth_token='': pass None to disable auth")
        if not (isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0):
            raise ValueError(f"HttpConfig.max_body_bytes={self.max_body_bytes!r}: use an int > 0")
        if not (isinstance(self.retry_grace_s, (int, float)) and self.retry_grace_s >= 0):
            raise ValueError(f"HttpConfig.retry_grace_s={self.retry_grace_s!r}: use seconds >= 0")


class HttpServer:
    def __init__(
        self, scheduler: Scheduler, config: HttpConfig, model_names: Callable[[], list[str]]
    ) -> None:
        self.config = config
        limits = AppLimits(config.auth_token, config.max_body_bytes, config.retry_grace_s)
        self.api = HttpApi(scheduler, limits, model_names)
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.config.tls else "http"
        host = self.config.host
        return (
            f"{scheme}://[{host}]:{self.port}" if ":" in host else f"{scheme}://{host}:{self.port}"
        )

    async def start(self) -> HttpServer:
        cfg = self.config
        tls = cfg.tls
        ucfg = uvicorn.Config(
            self.api.app(),
            lifespan="off",
            http="h11",  # pure Python: no compiled httptools needed for a lean install
            log_level="warning",
            access_log=False,
            ssl_certfile=tls.cert_file if tls else None,
            ssl_keyfile=tls.key_file if tls else None,
            ssl_ca_certs=tls.client_ca_file if tls else None,
            ssl_cert_reqs=2 if tls and tls.client_ca_file else 0,  # ssl.CERT_REQUIRED for mTLS
            timeout_graceful_shutdown=2,
        )
        ucfg.load()
        family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.host, cfg.port))
        except OSError as e:
            sock.close()
            raise RuntimeError(f"HTTP server could not bind {cfg.host}:{cfg.port}: {e}") from None
        sock.listen(ucfg.backlog)
        sock.setblocking(False)
        self._sock, self.port = sock, int(sock.getsockname()[1])
        server = uvicorn.Server(ucfg)
        server.lifespan = ucfg.lifespan_class(ucfg)
        await server.startup(sockets=[sock])
        self._server = server
        self._task = asyncio.get_running_loop().create_task(server.main_loop())
        return self

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await server.shutdown(sockets=[self._sock] if self._sock else None)
