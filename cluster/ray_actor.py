"""Everything in cluster/ that talks to Ray: the scheduler actor, and starting a cluster
(one worker actor per node advertising `specfleet_worker`, then the scheduler and gateway).

The scheduler actor is an async actor: the scheduler loop, one gRPC link per worker and the
gateway server all run on its event loop. Worker links resolve their worker's address through
the worker's actor handle, so when Ray restarts a worker (new process, new port) the link finds
it again. If the scheduler actor itself dies, requests it held are lost: their gateway streams
end with UNAVAILABLE and clients retry with the same request ids (see cluster/README notes in
the issue); it is not restarted automatically (max_restarts=0) because its gateway port would
move under the clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.metrics import SchedulerMetrics
from cluster.scheduler import Scheduler, SchedulerConfig
from cluster.tokenizer import TextTokenizer
from cluster.worker_rpc import GrpcWorkerLink, LinkConfig
from workers.service.engine_spec import EngineSpec
from workers.service.grpc_server import WorkerServerConfig
from workers.service.ray_actor import WORKER_RESOURCE, start_worker_actor

log = logging.getLogger(__name__)
SCHEDULER_NAME = "specfleet-scheduler"
NAMESPACE = "specfleet"


@dataclass(frozen=True)
class SchedulerActorConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    tokenizer_path: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = 0  # None: no scheduler metrics endpoint
    prometheus_targets_dir: str | None = None  # file_sd targets kept current (deploy/README)
    model_name: str = ""  # the workers' `model` metrics label, for the targets file


class SchedulerActor:
    def __init__(self, config: SchedulerActorConfig) -> None:
        self.config = config
        tok = TextTokenizer(config.tokenizer_path) if config.tokenizer_path else None
        self.metrics = SchedulerMetrics()
        self.metrics_url = ""
        self.sched: Scheduler | None = None
        self._tokenizer = tok
        self.gateway: GatewayServer | None = None
        self.links: dict[str, GrpcWorkerLink] = {}
        self.worker_meta: dict[str, dict[str, Any]] = {}

    async def start(self, workers: list[tuple[str, Any]]) -> dict[str, Any]:
        cfg = self.config
        self.sched = Scheduler(cfg.scheduler, self._tokenizer, self.metrics)
        self.sched.start()
        if cfg.metrics_port is not None:
            port = self.metrics.serve(cfg.metrics_port, cfg.metrics_host)
            self.metrics_url = f"http://{cfg.metrics_host}:{port}/metrics"
        await self.add_workers(workers)
        self.gateway = await GatewayServer(
            self.sched, cfg.gateway, lambda: {"metrics_url": self.metrics_url}
        ).start()
        self._write_targets()
        return await self.addresses()

    async def add_workers(self, workers: list[tuple[str, Any]]) -> None:
        assert self.sched is not None
        for worker_id, handle in workers:
            link = GrpcWorkerLink(
                worker_id, self._resolver(worker_id, handle), self.sched, self.config.link
            )
            self.sched.add_worker(link)
            self.links[worker_id] = link
            link.start()

    def _resolver(self, worker_id: str, handle: Any):  # type: ignore[no-untyped-def]
        async def resolve() -> str:
            await handle.wait_ready.remote(600.0)
            addrs = await handle.addresses.remote()
            self.worker_meta[worker_id] = addrs
            assert self.sched is not None
            slot = self.sched.workers[worker_id]
            slot.metrics_url = f"http://{addrs['metrics']}/metrics" if addrs.get("metrics") else ""
            self._write_targets()
            return str(addrs["grpc"])

        return resolve

    async def wait_connected(self, n: int, timeout: float = 300.0) -> int:
        """Wait until n workers have live sessions; returns how many do."""
        assert self.sched is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            count = sum(s.connected for s in self.sched.workers.values())
            if count >= n:
                return count
            await asyncio.sleep(0.05)
        return sum(s.connected for s in self.sched.workers.values())

    async def addresses(self) -> dict[str, Any]:
        assert self.gateway is not None and self.sched is not None
        return {
            "gateway": self.gateway.address,
            "metrics": self.metrics_url,
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

    async def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.metrics.registry).decode()

    async def break_worker_stream(self, worker_id: str) -> None:
        self.links[worker_id].break_stream()

    async def stop(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop(grace=1.0)
        for link in self.links.values():
            await link.stop()
        if self.sched is not None:
            await self.sched.stop()

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
            for wid, meta in self.worker_meta.items()
            if meta.get("metrics")
        ]
        sched = (
            [{"targets": [self.metrics_url.split("//")[-1].split("/")[0]]}]
            if self.metrics_url
            else []
        )
        for name, data in (("workers.json", groups), ("scheduler.json", sched)):
            tmp = path / (name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, path / name)


# -- starting a cluster ---------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterSpec:
    engine: EngineSpec = field(default_factory=EngineSpec)
    worker: WorkerServerConfig = field(default_factory=WorkerServerConfig)
    actor: SchedulerActorConfig = field(default_factory=SchedulerActorConfig)
    num_workers: int | None = None  # None: one per `specfleet_worker` unit in the Ray cluster
    worker_num_cpus: float = 1.0
    scheduler_name: str = SCHEDULER_NAME
    namespace: str = NAMESPACE


@dataclass
class RunningCluster:
    scheduler: Any  # ActorHandle[SchedulerActor]
    workers: list[Any]  # ActorHandle[WorkerActor]
    addresses: dict[str, Any]

    def shutdown(self) -> None:
        try:
            ray.get(self.scheduler.stop.remote(), timeout=30)
        except Exception as e:  # best effort: the process is going away anyway
            log.warning("scheduler stop failed: %r", e)
        for w in self.workers:
            ray.kill(w, no_restart=True)
        ray.kill(self.scheduler, no_restart=True)


def worker_units() -> int:
    """How many `specfleet_worker` units the connected Ray cluster advertises."""
    return int(ray.cluster_resources().get(WORKER_RESOURCE, 0))


def start_cluster(spec: ClusterSpec, connect_timeout_s: float = 600.0) -> RunningCluster:
    """Start workers and the scheduler in the Ray cluster this process is connected to."""
    n = spec.num_workers if spec.num_workers is not None else worker_units()
    if n < 1:
        raise RuntimeError(
            f"no node advertises the {WORKER_RESOURCE!r} resource: start nodes with "
            f"`ray start --resources='{{\"{WORKER_RESOURCE}\": 1}}'` or pass num_workers"
        )
    workers = [
        start_worker_actor(
            spec.engine,
            spec.worker,
            name=f"specfleet-worker-{i}",
            namespace=spec.namespace,
            num_cpus=spec.worker_num_cpus,
        )
        for i in range(n)
    ]
    actor_cls = ray.remote(SchedulerActor).options(
        name=spec.scheduler_name,
        namespace=spec.namespace,
        num_cpus=0,
        max_restarts=0,
        max_concurrency=1000,
    )
    scheduler: Any = actor_cls.remote(spec.actor)
    addresses = ray.get(scheduler.start.remote([(f"worker-{i}", w) for i, w in enumerate(workers)]))
    connected: int = ray.get(scheduler.wait_connected.remote(n, connect_timeout_s))
    if connected < n:
        raise RuntimeError(f"only {connected} of {n} workers came up within {connect_timeout_s}s")
    addresses = ray.get(scheduler.addresses.remote())
    return RunningCluster(scheduler, workers, addresses)


def gateway_address(name: str = SCHEDULER_NAME, namespace: str = NAMESPACE) -> str:
    """The gateway address of a running scheduler actor (for Client.from_ray)."""
    if not ray.is_initialized():
        ray.init(address="auto", namespace=namespace)
    actor: Any = ray.get_actor(name, namespace=namespace)
    return str(ray.get(actor.addresses.remote())["gateway"])
