"""Everything in cluster/ that talks to Ray: the scheduler actor, and starting a cluster
(one worker actor per node advertising `specfleet_worker`, then the scheduler and gateway).

Worker links find their worker through its actor's name, so when Ray restarts a worker (new
process, new port) the scheduler reconnects and re-sends the requests it held, each from its
committed prefix.

The scheduler actor is pinned to the driver's node and restarted by Ray if its process dies
(max_restarts=-1); it rebuilds itself from its constructor arguments, on the ports it had. Ports
left to the OS (0) are bound by the first start itself and kept in a ports file for restarts:
choosing them in the driver and binding them later in the actor let another process take one
in between ("Address already in use").
Requests it held are lost with it: their gateway calls fail with UNAVAILABLE. A scheduler
that fails fast (its dispatch pass kept raising) turns the gateway NOT_SERVING and then ends its
process with exit code 1 and a logged reason, so Ray restarts it the same way. The Python
client retries those with the same request id, and for deterministic requests (greedy or
seeded) it skips the tokens it already delivered, so a stream still sees each token once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.runtime import RuntimeConfig, SchedulerRuntime
from workers.service.engine_spec import EngineSpec
from workers.service.grpc_server import WorkerServerConfig
from workers.service.ray_actor import WORKER_RESOURCE, start_worker_actor

log = logging.getLogger(__name__)
SCHEDULER_NAME = "specfleet-scheduler"
NAMESPACE = "specfleet"


def _exit_for_restart(reason: str) -> None:
    log.critical("the scheduler failed, exiting so Ray restarts this actor: %s", reason)
    logging.shutdown()
    os._exit(1)  # not sys.exit: Ray treats a clean exit as intentional and would not restart


class SchedulerActor:
    """A threaded Ray actor around SchedulerRuntime. Everything starts in __init__ from the
    constructor arguments, so when Ray restarts this actor (max_restarts=-1) it comes back by
    itself: same gateway port, same workers (found again by their names)."""

    def __init__(
        self,
        config: RuntimeConfig,
        workers: list[tuple[str, str]],
        ports_file: str | None = None,
        namespace: str = NAMESPACE,
    ) -> None:
        """`workers`: (worker id, the worker actor's name in `namespace`). Names, not actor
        handles: a handle among an actor's constructor arguments is an object ref that Ray
        keeps for restarts only as long as the caller holds it (ray-project/ray#53727, which
        Ray logs as an error at creation), and a name finds a restarted worker as well."""
        if config.advertise_host is None:
            config = dataclasses.replace(config, advertise_host=ray.util.get_node_ip_address())
        self.ports_file = ports_file
        if ports_file is not None and os.path.exists(ports_file):  # a restart: the same ports
            with open(ports_file) as f:
                config = _with_ports(config, json.load(f))
        self.runtime = SchedulerRuntime(config, on_fatal=_exit_for_restart)
        located = [(wid, _locator(name, namespace)) for wid, name in workers]
        self.runtime.call(self.runtime.start(located))
        if ports_file is not None:
            _write_atomically(ports_file, json.dumps(_bound_ports(self.runtime)))

    def addresses(self) -> dict[str, Any]:
        return self.runtime.call(self.runtime.addresses())

    def wait_connected(self, n: int, timeout: float = 300.0) -> int:
        return self.runtime.call(self.runtime.wait_connected(n, timeout), timeout + 10)

    def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.runtime.metrics.registry).decode()

    def break_worker_stream(self, worker_id: str) -> None:
        self.runtime.loop.call_soon_threadsafe(self.runtime.links[worker_id].break_stream)

    def stop(self) -> None:
        self.runtime.call(self.runtime.stop(), timeout=30)
        if self.ports_file is not None:  # stopped for good: no restart will look for it
            with contextlib.suppress(OSError):
                os.remove(self.ports_file)


def _bound_ports(runtime: SchedulerRuntime) -> dict[str, int | None]:
    assert runtime.gateway is not None
    return {
        "gateway": runtime.gateway.port,
        "metrics": runtime.metrics_port,
        "http": None if runtime.http is None else runtime.http.port,
    }


def _with_ports(config: RuntimeConfig, ports: dict[str, Any]) -> RuntimeConfig:
    gateway = dataclasses.replace(config.gateway, port=int(ports["gateway"]))
    http = config.http
    if http is not None and ports.get("http") is not None:
        http = dataclasses.replace(http, port=int(ports["http"]))
    return dataclasses.replace(config, gateway=gateway, metrics_port=ports["metrics"], http=http)


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # a restart racing this write reads the old file or the new, whole


def _locator(name: str, namespace: str) -> Any:
    async def locate() -> dict[str, Any]:
        # Looked up on every call (a blocking GCS read, off the loop); a worker gone for good
        # raises here, and the link retries as for any failed resolve. Both calls below are
        # retried by Ray across a worker restart (max_task_retries=-1).
        handle = await asyncio.to_thread(ray.get_actor, name, namespace)
        await handle.wait_ready.remote(600.0)
        return dict(await handle.addresses.remote())

    return locate


# -- starting a cluster ---------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterSpec:
    engine: EngineSpec = field(default_factory=EngineSpec)
    worker: WorkerServerConfig = field(default_factory=WorkerServerConfig)
    actor: RuntimeConfig = field(default_factory=RuntimeConfig)
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


def worker_name(i: int) -> str:
    """The name of a cluster's i-th worker actor (in the cluster's namespace)."""
    return f"specfleet-worker-{i}"


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
            name=worker_name(i),
            namespace=spec.namespace,
            num_cpus=spec.worker_num_cpus,
        )
        for i in range(n)
    ]
    scheduler = start_scheduler_actor(
        spec.actor,
        [(f"worker-{i}", worker_name(i)) for i in range(n)],
        name=spec.scheduler_name,
        namespace=spec.namespace,
    )
    connected: int = ray.get(scheduler.wait_connected.remote(n, connect_timeout_s))
    if connected < n:
        raise RuntimeError(f"only {connected} of {n} workers came up within {connect_timeout_s}s")
    addresses = ray.get(scheduler.addresses.remote())
    return RunningCluster(scheduler, workers, addresses)


def start_scheduler_actor(
    config: RuntimeConfig,
    workers: list[tuple[str, str]],
    name: str = SCHEDULER_NAME,
    namespace: str = NAMESPACE,
    actor_cls: type[SchedulerActor] = SchedulerActor,
) -> Any:
    """The scheduler actor on this driver's node, restarted by Ray whenever its process dies
    (a crash, a kill, or its own fail-fast exit); returns its handle. `workers`: (worker id,
    worker actor name in `namespace`)."""
    # A restarted scheduler must come back where it was: the first start writes its bound
    # ports here (the actor runs on this node, so the driver's temp dir is the actor's).
    ports_file = os.path.join(
        tempfile.gettempdir(), f"specfleet-ports-{namespace}-{name}-{uuid.uuid4().hex[:8]}.json"
    )
    remote_cls = ray.remote(actor_cls).options(
        name=name,
        namespace=namespace,
        num_cpus=0,
        max_restarts=-1,
        max_task_retries=-1,  # its methods are idempotent reads
        max_concurrency=16,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    )
    return remote_cls.remote(config, workers, ports_file, namespace)


def gateway_address(name: str = SCHEDULER_NAME, namespace: str = NAMESPACE) -> str:
    """The gateway address of a running scheduler actor (for Client.from_ray)."""
    if not ray.is_initialized():
        ray.init(address="auto", namespace=namespace)
    actor: Any = ray.get_actor(name, namespace=namespace)
    return str(ray.get(actor.addresses.remote())["gateway"])
