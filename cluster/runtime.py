"""The scheduler process's contents, without Ray: scheduler loop, one gRPC link per worker,
gateway server and metrics endpoint, all on one asyncio loop owned by a background thread.

The Ray actor (cluster/ray_actor.py) wraps one of these; tests and single-machine tools can use
it directly. Workers are given as (worker_id, locate) pairs where `locate()` returns the
worker's current addresses ({"grpc": "host:port", "metrics": "host:port" | None, ...}), so a
worker restarted elsewhere (new port) is found again.

Fail fast: when the scheduler gives up (its dispatch pass kept raising, cluster/scheduler.py
`_fail_fast`), the gateway's grpc.health.v1 status turns NOT_SERVING, the runtime waits
`fatal_grace_s` so the UNAVAILABLE answers of the aborted calls and the health change reach
clients, then calls `on_fatal(reason)`; the Ray actor exits its process there so Ray restarts it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.http import HttpConfig, HttpServer
from cluster.http.app import served_models
from cluster.metrics import SchedulerMetrics
from cluster.scheduler import Scheduler, SchedulerConfig
from cluster.tokenizer import TextTokenizer
from cluster.worker_rpc import GrpcWorkerLink, LinkConfig

T = TypeVar("T")
Locate = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class RuntimeConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    http: HttpConfig | None = None  # OpenAI/Anthropic HTTP beside the gateway (cluster/http)
    link: LinkConfig = field(default_factory=LinkConfig)
    tokenizer_path: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = 0  # None: no scheduler metrics endpoint
    prometheus_targets_dir: str | None = None  # file_sd targets kept current (deploy/README)
    model_name: str = ""  # the workers' `model` metrics label, for the targets file
    # Host to print and publish when the gateway / metrics bind all interfaces (0.0.0.0).
    advertise_host: str | None = None
    # After the scheduler failed: seconds between the gateway turning NOT_SERVING and `on_fatal`
    # (the aborted calls' statuses and health watchers' NOT_SERVING are sent meanwhile).
    fatal_grace_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.fatal_grace_s <= 60:
            raise ValueError(f"RuntimeConfig.fatal_grace_s={self.fatal_grace_s!r}: use 0..60 s")


class SchedulerRuntime:
    def __init__(
        self, config: RuntimeConfig, on_fatal: Callable[[str], None] | None = None
    ) -> None:
        self.config = config
        tok = TextTokenizer(config.tokenizer_path) if config.tokenizer_path else None
        self.metrics = SchedulerMetrics()
        self.metrics_url = ""
        self.metrics_port: int | None = None  # bound, once started
        self.on_fatal = on_fatal  # called (on the loop) after the scheduler failed; may not return
        self.sched = Scheduler(config.scheduler, tok, self.metrics, on_fatal=self._scheduler_failed)
        self._fatal_task: asyncio.Task[None] | None = None
        self.gateway: GatewayServer | None = None
        self.http: HttpServer | None = None
        self.links: dict[str, GrpcWorkerLink] = {}
        self.worker_meta: dict[str, dict[str, Any]] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="specfleet-scheduler", daemon=True
        )
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the runtime's loop from any other thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # -- on the loop ----------------------------------------------------------------------
    async def start(self, workers: list[tuple[str, Locate]]) -> dict[str, Any]:
        cfg = self.config
        self.sched.start()
        if cfg.metrics_port is not None:
            port = self.metrics_port = self.metrics.serve(cfg.metrics_port, cfg.metrics_host)
            self.metrics_url = f"http://{self._public(cfg.metrics_host)}:{port}/metrics"
        await self.add_workers(workers)
        self.gateway = await GatewayServer(
            self.sched, cfg.gateway, lambda: {"metrics_url": self.metrics_url}
        ).start()
        if cfg.http is not None:
            names = served_models(self.sched, cfg.http.model_name or cfg.model_name)
            self.http = await HttpServer(self.sched, cfg.http, names).start()
        self._write_targets()
        return await self.addresses()

    async def add_workers(self, workers: list[tuple[str, Locate]]) -> None:
        for worker_id, locate in workers:
            link = GrpcWorkerLink(
                worker_id, self._resolver(worker_id, locate), self.sched, self.config.link
            )
            self.sched.add_worker(link)
            self.links[worker_id] = link
            link.start()

    def _resolver(self, worker_id: str, locate: Locate) -> Callable[[], Awaitable[str]]:
        async def resolve() -> str:
            addrs = await locate()
            self.worker_meta[worker_id] = addrs
            slot = self.sched.workers[worker_id]
            slot.metrics_url = f"http://{addrs['metrics']}/metrics" if addrs.get("metrics") else ""
            self._write_targets()
            return str(addrs["grpc"])

        return resolve

    async def wait_connected(self, n: int, timeout: float = 300.0) -> int:
        """Wait until n workers have live sessions; returns how many do."""
        end = self.loop.time() + timeout
        while self.loop.time() < end and self.num_connected() < n:
            await asyncio.sleep(0.05)
        return self.num_connected()

    def _scheduler_failed(self, reason: str) -> None:
        """The scheduler's fail-fast hook (on the loop, inside its dispatch task)."""
        if self._fatal_task is None:
            self._fatal_task = self.loop.create_task(self._fail(reason))

    async def _fail(self, reason: str) -> None:
        try:
            if self.gateway is not None:
                await self.gateway.set_serving(False)
            await asyncio.sleep(self.config.fatal_grace_s)
        finally:
            if self.on_fatal is not None:
                self.on_fatal(reason)

    def num_connected(self) -> int:
        return sum(s.connected for s in self.sched.workers.values())

    async def addresses(self) -> dict[str, Any]:
        assert self.gateway is not None
        return {
            "gateway": f"{self._public(self.gateway.config.host)}:{self.gateway.port}",
            "metrics": self.metrics_url,
            "http": self._http_url(),
            "pid": os.getpid(),
            "workers": {
                wid: {
                    "grpc": s.address,
                    "metrics": s.metrics_url,
                    "connected": s.connected,
                    "connections": s.connections,
                }
                for wid, s in self.sched.workers.items()
            },
        }

    def _http_url(self) -> str:
        if self.http is None:
            return ""
        scheme = "https" if self.http.config.tls else "http"
        return f"{scheme}://{self._public(self.http.config.host)}:{self.http.port}"

    def _public(self, host: str) -> str:
        if host in ("0.0.0.0", "::", "") and self.config.advertise_host:
            return self.config.advertise_host
        return host

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.gateway is not None:
            await self.gateway.stop(grace=1.0)
        for link in self.links.values():
            await link.stop()
        await self.sched.stop()

    def close(self) -> None:
        """Stop everything and the loop thread (from another thread)."""
        try:
            self.call(self.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)

    def _write_targets(self) -> None:
        d = self.config.prometheus_targets_dir
        if not d:
            return
        path = Path(d)
        path.mkdir(parents=True, exist_ok=True)
        groups = [
            {
                "targets": [meta["metrics"]],
                "labels": {"worker": meta.get("worker_id", wid), "model": self.config.model_name},
            }
            for wid, meta in sorted(self.worker_meta.items())
            if meta.get("metrics")
        ]
        host_port = self.metrics_url.split("//")[-1].split("/")[0]
        sched = [{"targets": [host_port]}] if self.metrics_url else []
        for name, data in (("workers.json", groups), ("scheduler.json", sched)):
            tmp = path / (name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, path / name)  # Prometheus never reads half a file
