"""Health while loading and draining, graceful drain, and a fatal engine error."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from protos import worker_codec as codec
from tests.workers.service.fake_engine import FakeEngine, expected_tokens
from workers.service.grpc_client import WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import SamplingParams

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _until(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_not_serving_while_loading() -> None:
    release = threading.Event()

    def slow_factory() -> FakeEngine:
        release.wait(30)
        return FakeEngine()

    server = WorkerServer(slow_factory, WorkerServerConfig(metrics_port=None)).start()
    try:
        with WorkerClient(server.address) as client:
            assert client.health() == NOT_SERVING
            assert client.health("specfleet.v1.Worker") == NOT_SERVING
            with pytest.raises(grpc.RpcError) as err:
                client.info()
            assert (
                err.value.code() == grpc.StatusCode.UNAVAILABLE and "loading" in err.value.details()
            )
            with pytest.raises(grpc.RpcError) as err:
                client.generate({"x": [1]})
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            release.set()
            _until(lambda: client.health() == SERVING)
            assert client.generate({"x": [1]}, SamplingParams(max_tokens=2))["x"].tokens == [2, 3]
    finally:
        release.set()
        server.stop(grace=0.5)


def test_graceful_drain_finishes_running_requests_and_refuses_new() -> None:
    engine = FakeEngine(step_delay_s=0.01)
    server = WorkerServer(lambda: engine, WorkerServerConfig(metrics_port=None)).start(
        wait_ready=True
    )
    client = WorkerClient(server.address)
    try:
        s = client.session(timeout=30)
        s.send([codec.SubmitRequest("old", [1], SamplingParams(max_tokens=60))])
        events = s.events()
        tokens = list(next(events).new_tokens)
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 20})
        stopper.start()
        _until(lambda: client.health() == NOT_SERVING)
        s.send([codec.SubmitRequest("new", [1], SamplingParams(max_tokens=5))])  # refused in-stream
        refused = None
        for ev in events:
            if isinstance(ev, codec.RequestError):
                refused = ev
            else:
                tokens += ev.new_tokens
                if ev.finished:
                    break
        assert refused is not None and refused.code == "UNAVAILABLE" and refused.request_id == "new"
        assert tokens == expected_tokens([1], 60)  # the running request completed in full
        with WorkerClient(server.address) as late, pytest.raises(grpc.RpcError) as err:
            late.generate({"y": [1]})
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        s.close()
        stopper.join(30)
        assert not stopper.is_alive()
    finally:
        client.close()
        server.stop(grace=0.5)


def test_fatal_engine_error_fails_streams_and_calls_on_fatal() -> None:
    engine = FakeEngine(step_delay_s=0.005)
    fatal: list[BaseException] = []
    server = WorkerServer(
        lambda: engine, WorkerServerConfig(metrics_port=None), on_fatal=fatal.append
    )
    server.start(wait_ready=True)
    try:
        with WorkerClient(server.address) as client:
            s = client.session(timeout=30)
            s.send([codec.SubmitRequest("a", [1], SamplingParams(max_tokens=400))])
            events = s.events()
            next(events)
            engine.fail_next_step = True
            with pytest.raises(grpc.RpcError) as err:
                for _ in events:
                    pass
            assert (
                err.value.code() == grpc.StatusCode.UNAVAILABLE
                and "simulated fatal" in err.value.details()
            )
            _until(lambda: bool(fatal))
            assert "simulated fatal" in str(fatal[0])
            _until(lambda: client.health() == NOT_SERVING)
    finally:
        server.stop(grace=0.5)
