"""The scheduler's fail-fast hook wired through the runtime: a dispatch pass that keeps raising
ends the waiting call with UNAVAILABLE, turns the gateway's grpc.health.v1 status (and the HTTP
/health) NOT_SERVING, and only after the grace period calls the runtime's `on_fatal` (the Ray
actor exits there so Ray restarts it; tests/integration/test_scheduler_restart.py).

Real parts: SchedulerRuntime with its gRPC gateway, HTTP server and a gRPC link to a real
worker server running a fake engine, all on loopback."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster import Client
from cluster.client import Unavailable
from cluster.http import HttpConfig
from cluster.policy import PolicyConfig
from cluster.runtime import RuntimeConfig, SchedulerRuntime
from cluster.scheduler import SchedulerConfig
from tests.cluster.fake_engine import FakeEngine, reference
from workers.service.grpc_server import WorkerServer, WorkerServerConfig

pytestmark = pytest.mark.timeout(120)
GRACE_S = 3.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def http_health(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_failing_dispatch_turns_gateway_not_serving_then_calls_on_fatal() -> None:
    eng = FakeEngine()
    server = WorkerServer(lambda: eng, WorkerServerConfig(metrics_port=None, worker_id="w0")).start(
        wait_ready=True, timeout=10
    )
    fatal: list[tuple[str, float]] = []
    fatal_called = threading.Event()

    def on_fatal(reason: str) -> None:
        fatal.append((reason, time.monotonic()))
        fatal_called.set()

    config = RuntimeConfig(
        scheduler=SchedulerConfig(PolicyConfig(coalesce_window_s=0.0), max_tick_failures=3),
        http=HttpConfig(),
        metrics_port=None,
        fatal_grace_s=GRACE_S,
    )
    rt = SchedulerRuntime(config, on_fatal=on_fatal)

    async def locate() -> dict[str, Any]:
        return {"grpc": server.address, "metrics": None}

    try:
        addrs = rt.call(rt.start([("w0", locate)]))
        assert rt.call(rt.wait_connected(1, 10)) == 1
        health_url = f"{addrs['http']}/health"
        with (
            grpc.insecure_channel(addrs["gateway"]) as ch,
            Client(addrs["gateway"], retry_timeout_s=0) as client,
        ):
            health = health_pb2_grpc.HealthStub(ch)

            def status(service: str = "") -> int:
                req = health_pb2.HealthCheckRequest(service=service)
                return int(health.Check(req, timeout=5).status)

            assert status() == SERVING and status("specfleet.v1.Gateway") == SERVING
            assert http_health(health_url)[0] == 200
            assert client.generate([1, 2, 3], max_tokens=4).tokens == reference([1, 2, 3], 4)

            def broken(*args: object) -> list[Any]:
                raise RuntimeError("bug in batch formation")

            rt.loop.call_soon_threadsafe(setattr, rt.sched.policy, "form_batches", broken)
            with pytest.raises(Unavailable) as e:
                client.generate([4, 5, 6], max_tokens=4)
            assert "the scheduler failed" in e.value.message
            assert "bug in batch formation" in e.value.message
            failed_at = time.monotonic()

            # NOT_SERVING on both health names while the hook waits out its grace period.
            deadline = failed_at + GRACE_S / 2
            while status() != NOT_SERVING and time.monotonic() < deadline:
                time.sleep(0.02)
            assert status() == NOT_SERVING and status("specfleet.v1.Gateway") == NOT_SERVING
            code, body = http_health(health_url)
            assert code == 503 and "bug in batch formation" in body["status"]
            assert not fatal, "on_fatal ran before the gateway reported NOT_SERVING"
            with pytest.raises(Unavailable):  # refused, not queued
                client.generate([7], max_tokens=2)

            assert fatal_called.wait(GRACE_S + 10)
            ((reason, at),) = fatal
            assert "dispatch failed 3 times in a row" in reason
            assert "bug in batch formation" in reason
            assert at - failed_at >= GRACE_S * 0.5  # it waited for clients to see the change
            assert rt.metrics.tick_failures._value.get() == 3
    finally:
        rt.close()
        server.stop(grace=0.5)


def test_fatal_grace_out_of_range_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"RuntimeConfig.fatal_grace_s=-1.*0..60"):
        RuntimeConfig(fatal_grace_s=-1)
