"""A client that reads its Session slower than the worker generates: the per-session backlog is
bounded (WorkerServerConfig.max_session_backlog_tokens). Real loopback server, fake engine."""

from __future__ import annotations

import time

import grpc
import pytest

from protos import worker_codec as codec
from protos.specfleet.v1 import worker_pb2_grpc as pb_grpc
from tests.workers.service.fake_engine import FakeEngine, expected_tokens
from workers.service.grpc_client import Session, WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import SamplingParams

pytestmark = pytest.mark.timeout(120)
LIMIT = 4096
MAX_TOKENS = 20_000


def test_slow_client_stream_ends_resource_exhausted_and_its_rows_are_freed() -> None:
    engine = FakeEngine(max_batch_size=16, max_context=1 << 16, step_delay_s=0.001)
    cfg = WorkerServerConfig(metrics_port=None, max_session_backlog_tokens=LIMIT)
    server = WorkerServer(lambda: engine, cfg).start(wait_ready=True, timeout=30)
    try:
        # bdp_probe off keeps this client's receive window at 64 KiB, so the server's writes
        # block early and the events the engine keeps producing wait in the session outbox.
        channel = grpc.insecure_channel(server.address, options=[("grpc.http2.bdp_probe", 0)])
        slow = Session(pb_grpc.WorkerStub(channel), (), timeout=60)
        params = SamplingParams(max_tokens=MAX_TOKENS)
        prompts = {f"r{i}": [i + 1, 2 * i + 1] for i in range(16)}
        slow.send([codec.SubmitRequest(rid, p, params) for rid, p in prompts.items()])
        # Without reading a byte: the overflow aborts the session's rows, the engine idles.
        deadline = time.monotonic() + 60
        while engine.num_added < len(prompts) and time.monotonic() < deadline:
            time.sleep(0.01)
        while engine.has_work() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.num_added == len(prompts) and not engine.has_work(), "rows not aborted"
        # Now read: what was sent arrives, once and in order; then the stream fails.
        got: dict[str, list[int]] = {rid: [] for rid in prompts}
        with pytest.raises(grpc.RpcError) as e:
            for ev in slow.events():
                assert isinstance(ev, codec.RequestOutput) and not ev.finished
                got[ev.request_id] += ev.new_tokens
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = e.value.details()
        assert f"max_session_backlog_tokens={LIMIT}" in details
        assert "WorkerServerConfig.max_session_backlog_tokens" in details
        for rid, prompt in prompts.items():
            assert got[rid] == expected_tokens(prompt, MAX_TOKENS)[: len(got[rid])]
        assert sum(map(len, got.values())) > 0  # the client did receive a prefix
        assert all(len(t) < MAX_TOKENS for t in got.values())
        channel.close()
        # The worker keeps serving other sessions, under the same limit.
        with WorkerClient(server.address) as client:
            res = client.generate({"ok": [5]}, SamplingParams(max_tokens=30))
            assert res["ok"].tokens == expected_tokens([5], 30)
            assert res["ok"].finish is not None and res["ok"].finish.finish_reason == "length"
    finally:
        server.stop(grace=1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_backlog_limit_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="max_session_backlog_tokens"):
        WorkerServerConfig(max_session_backlog_tokens=bad)  # type: ignore[arg-type]
