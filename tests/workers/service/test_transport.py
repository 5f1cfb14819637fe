"""Session/Info/health/reflection on a real loopback server with a fake engine."""

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


@pytest.fixture(scope="module")
def served():
    engine = FakeEngine(max_batch_size=4, step_delay_s=0.002)
    server = WorkerServer(lambda: engine, WorkerServerConfig(drain_grace_s=2)).start(
        wait_ready=True, timeout=30
    )
    client = WorkerClient(server.address)
    yield server, client, engine
    client.close()
    server.stop(grace=1)


def test_health_info_and_reflection(served) -> None:
    server, client, _ = served
    assert client.health() == health_pb2.HealthCheckResponse.SERVING
    assert client.health("specfleet.v1.Worker") == health_pb2.HealthCheckResponse.SERVING
    info = client.info()
    assert info.state == "serving" and info.engine.vocab_size == 256 and info.engine.free_slots == 4
    assert info.worker_id == server.worker_id
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    db = ProtoReflectionDescriptorDatabase(client.channel)
    assert "specfleet.v1.Worker" in set(db.get_services())


def test_concurrent_sessions_stream_expected_tokens(served) -> None:
    _, client, _ = served
    prompts = {f"r{i}": [i + 1] * (1 + i % 5) for i in range(12)}
    results: dict[int, dict] = {}

    def run(k: int) -> None:
        results[k] = client.generate(prompts, SamplingParams(max_tokens=7 + k))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for k in range(3):
        for rid, prompt in prompts.items():
            res = results[k][rid]
            assert res.error is None, res.error
            assert res.tokens == expected_tokens(prompt, 7 + k)
            assert res.finish.finish_reason == "length"
            assert res.finish.num_generated_tokens == 7 + k


def test_per_request_errors_stay_in_stream(served) -> None:
    _, client, _ = served
    s = client.session(timeout=30)
    s.send([codec.SubmitRequest("bad-vocab", [1, 999], SamplingParams(max_tokens=3))])
    s.send([codec.SubmitRequest("good", [5], SamplingParams(max_tokens=4))])
    s.send(
        [codec.SubmitRequest("good", [5], SamplingParams(max_tokens=4))]
    )  # duplicate while running
    s.close()
    errors, good = [], []
    for ev in s.events():  # the stream ends by itself once "good" finishes (half-closed)
        if isinstance(ev, codec.RequestError):
            errors.append(ev)
        else:
            assert ev.request_id == "good"
            good += ev.new_tokens
    assert sorted((e.request_id, e.code, e.field) for e in errors) == [
        ("bad-vocab", "INVALID_ARGUMENT", "prompt"),
        ("good", "INVALID_ARGUMENT", "id"),
    ]
    assert any("999" in e.message for e in errors) and any(
        "already running" in e.message for e in errors
    )
    assert good == [6, 7, 8, 9]


def _wait_rows_free(client: WorkerClient, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.info().engine
        if info.num_running == 0 and info.num_waiting == 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"rows not freed: {client.info().engine}")


def test_cancel_and_deadline_free_rows(served) -> None:
    _, client, engine = served
    s = client.session()
    s.send([codec.SubmitRequest(f"c{i}", [1], SamplingParams(max_tokens=400)) for i in range(6)])
    first = next(s.events())
    assert first.new_tokens
    assert client.info().engine.num_running > 0
    s.cancel()
    _wait_rows_free(client)

    s = client.session(timeout=0.3)
    s.send([codec.SubmitRequest(f"d{i}", [1], SamplingParams(max_tokens=400)) for i in range(6)])
    with pytest.raises(grpc.RpcError) as err:
        for _ in s.events():
            pass
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_rows_free(client)
