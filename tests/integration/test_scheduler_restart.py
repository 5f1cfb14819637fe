"""A scheduler actor whose dispatch pass keeps raising fails fast under a real Ray runtime: the
queued call ends with UNAVAILABLE naming the reason, a grpc.health.v1 Watch on the gateway
sees NOT_SERVING, the actor's process exits and Ray restarts it (new pid, same gateway and
metrics ports, SERVING again). No workers are needed: the failing step is the queue's deadline pass, which
runs on every dispatch tick."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

ray = pytest.importorskip("ray")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from cluster import Client  # noqa: E402
from cluster.client import Unavailable  # noqa: E402
from cluster.policy import PolicyConfig  # noqa: E402
from cluster.ray_actor import SchedulerActor, start_scheduler_actor  # noqa: E402
from cluster.runtime import RuntimeConfig  # noqa: E402
from cluster.scheduler import SchedulerConfig  # noqa: E402
from tests.ray_startup import start_ray  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
pytestmark = pytest.mark.timeout(300)


class BreakableSchedulerActor(SchedulerActor):
    """The production actor plus one way to break its dispatch pass (this process only: a
    restarted actor is built fresh from the constructor and works)."""

    def break_dispatch(self) -> None:
        sched = self.runtime.sched

        def broken(now: float) -> list[Any]:
            raise RuntimeError("injected dispatch bug")

        def install() -> None:
            sched.policy.expire = broken  # type: ignore[method-assign]
            sched._kick()

        self.runtime.loop.call_soon_threadsafe(install)


def test_failing_scheduler_actor_goes_not_serving_exits_and_ray_restarts_it() -> None:
    namespace = f"specfleet-restart-{uuid.uuid4().hex[:8]}"
    start_ray(
        lambda: ray.init(
            num_cpus=1,
            namespace=namespace,
            log_to_driver=False,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
        )
    )
    handle: Any = None
    try:
        config = RuntimeConfig(
            scheduler=SchedulerConfig(PolicyConfig(coalesce_window_s=0.0), max_tick_failures=3),
            fatal_grace_s=2.0,  # gateway and metrics on ports the first start binds (0)
        )
        handle = start_scheduler_actor(
            config,
            [],
            name="sched-under-test",
            namespace=namespace,
            actor_cls=BreakableSchedulerActor,
        )
        before = ray.get(handle.addresses.remote(), timeout=120)
        gateway = before["gateway"]
        with grpc.insecure_channel(gateway) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            check = health_pb2.HealthCheckRequest(service="")
            assert health.Check(check, timeout=10).status == SERVING

            seen: list[int] = []
            watch = health.Watch(check, timeout=60)
            first = threading.Event()

            def follow() -> None:
                try:
                    for resp in watch:
                        seen.append(int(resp.status))
                        first.set()
                except grpc.RpcError:
                    pass  # the process went away: the stream breaks

            watcher = threading.Thread(target=follow, daemon=True)
            watcher.start()
            assert first.wait(10) and seen == [SERVING]

            queued: list[BaseException] = []

            def wait_in_queue() -> None:  # no workers: it waits until the scheduler fails
                with Client(gateway, retry_timeout_s=0) as c:
                    try:
                        c.generate([1, 2, 3], max_tokens=2, request_id="queued")
                    except Exception as e:
                        queued.append(e)

            waiter = threading.Thread(target=wait_in_queue, daemon=True)
            waiter.start()
            time.sleep(0.5)  # let it reach the queue
            ray.get(handle.break_dispatch.remote(), timeout=30)

            waiter.join(30)
            assert len(queued) == 1 and isinstance(queued[0], Unavailable)
            assert "the scheduler failed" in str(queued[0])
            assert "injected dispatch bug" in str(queued[0])
            watcher.join(60)
            assert not watcher.is_alive(), "the old process should be gone"
            assert seen[:2] == [SERVING, NOT_SERVING]

            # Ray restarts the actor: a new process on the same gateway and metrics ports (the
            # first start's, from its ports file), SERVING again.
            after = ray.get(handle.addresses.remote(), timeout=120)
            assert after["pid"] != before["pid"] and after["gateway"] == gateway
            assert before["metrics"] and after["metrics"] == before["metrics"]
            end = time.monotonic() + 60
            status = None
            while time.monotonic() < end:
                try:
                    status = health.Check(check, timeout=5).status
                    if status == SERVING:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
            assert status == SERVING
    finally:
        if handle is not None:
            ray.kill(handle, no_restart=True)
        ray.shutdown()
