"""The worker as a Ray actor: the only module on the worker side that imports ray.

One actor per Mac, placed by the custom resource `specfleet_worker` (start each node with
`ray start --resources='{"specfleet_worker": 1}'`). The actor starts the gRPC server and the
metrics endpoint in its own process, loads the model once (on the engine thread, behind health
NOT_SERVING), and reports its addresses. A fatal engine error ends the process with exit code 1,
so Ray restarts the actor (max_restarts=-1); `shutdown()` is an intentional exit and is not
retried. The scheduler should re-read `addresses()` after a restart: with port=0 the port changes.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import ray

from workers.service.engine_spec import EngineSpec
from workers.service.grpc_server import WorkerServer, WorkerServerConfig

WORKER_RESOURCE = "specfleet_worker"
log = logging.getLogger(__name__)


def _exit_for_restart(error: BaseException) -> None:
    log.error("fatal engine error, exiting so Ray restarts this worker: %r", error)
    logging.shutdown()
    os._exit(1)  # not sys.exit: Ray treats a clean exit as intentional and would not restart


class WorkerActor:
    def __init__(self, spec: EngineSpec, config: WorkerServerConfig | None = None) -> None:
        config = config or WorkerServerConfig()
        self.spec = spec
        self.server = WorkerServer(spec.build, config, on_fatal=_exit_for_restart).start()
        host = config.host
        if host in ("0.0.0.0", "::", ""):  # bound to all interfaces: advertise the node's IP
            host = ray.util.get_node_ip_address()
        self._host = host

    def addresses(self) -> dict[str, Any]:
        server = self.server
        return {
            "worker_id": server.worker_id,
            "grpc": f"{self._host}:{server.port}",
            "metrics": None
            if server.metrics_port is None
            else f"{self._host}:{server.metrics_port}",
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }

    def wait_ready(self, timeout: float = 300.0) -> bool:
        """True once the model is loaded and the worker is SERVING."""
        assert self.server.engine_loop is not None
        return self.server.engine_loop.wait_ready(timeout)

    def state(self) -> str:
        assert self.server.engine_loop is not None
        return self.server.engine_loop.state

    def shutdown(self, grace: float | None = None) -> None:
        """Drain and exit on purpose (Ray will not restart the actor)."""
        self.server.stop(grace)
        ray.actor.exit_actor()


def start_worker_actor(
    spec: EngineSpec,
    config: WorkerServerConfig | None = None,
    *,
    name: str | None = None,
    namespace: str | None = None,
    num_cpus: float = 1,
    resources: dict[str, float] | None = None,
    runtime_env: dict[str, Any] | None = None,
) -> Any:  # ray.actor.ActorHandle[WorkerActor]
    """Start one worker actor on a node advertising `specfleet_worker` (one per Mac)."""
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "resources": {WORKER_RESOURCE: 1} if resources is None else resources,
        "max_restarts": -1,
        # Idempotent reads (addresses, wait_ready) may be retried across a restart.
        "max_task_retries": -1,
        "max_concurrency": 4,  # addresses() must answer while wait_ready() blocks
    }
    if name is not None:
        options["name"] = name
    if namespace is not None:
        options["namespace"] = namespace
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    return ray.remote(WorkerActor).options(**options).remote(spec, config)
