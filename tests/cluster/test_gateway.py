"""Gateway gRPC service + Python client over loopback, scheduler and real worker servers (fake
engines) behind it; health, reflection, auth, errors as exceptions."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cluster import Client
from cluster.client import InvalidRequestError, QueueFullError, SpecfleetError
from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.tokenizer import TextTokenizer
from tests.cluster.fake_engine import fake_logprobs, reference
from tests.cluster.test_scheduler import Harness
from tests.cluster.tiny_tokenizer import write_tiny_tokenizer

pytestmark = pytest.mark.timeout(120)
TOKEN = "gw-secret"


class Running:
    """Harness + gateway on an event loop in a background thread (the client is synchronous)."""

    def __init__(self, tmp: Path, max_queue: int = 4096, token: str | None = None, n: int = 2):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.h = Harness(n=n, max_queue=max_queue)
        self.h.sched.tokenizer = TextTokenizer(write_tiny_tokenizer(tmp / "tok"))
        self.token = token

        async def up() -> GatewayServer:
            await self.h.__aenter__()
            return await GatewayServer(self.h.sched, GatewayConfig(auth_token=token)).start()

        self.gw = self.call(up())

    def call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.call(self.gw.stop(0.5))
        self.call(self.h.__aexit__())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture()
def running(tmp_path: Path):
    r = Running(tmp_path)
    yield r
    r.close()


def test_generate_stream_batch_cancel_info(running: Running) -> None:
    with Client(running.gw.address) as c:
        out = c.generate([5, 6, 7], max_tokens=9)
        assert out.tokens == reference([5, 6, 7], 9) and out.finish_reason == "length"
        assert out.usage.completion_tokens == 9 and out.usage.draft_tokens == 27
        assert out.usage.cached_tokens == 0
        # The worker's prefix-cache hits travel worker wire -> scheduler -> gateway -> client.
        again = c.generate([5, 6, 7, 8], max_tokens=2)
        assert again.usage.cached_tokens == 3 and again.usage.prompt_tokens == 4
        text = c.generate("hello", max_tokens=6)
        assert text.tokens == reference(list(b"hello"), 6)
        assert text.text == bytes(text.tokens).decode("utf-8", errors="replace")
        deltas = list(c.stream("hi", max_tokens=12))
        assert deltas[-1].finished and deltas[-1].usage.completion_tokens == 12
        assert sum((d.tokens for d in deltas), []) == reference(list(b"hi"), 12)
        chat = c.generate([{"role": "user", "content": "yo"}], max_tokens=4)
        assert chat.tokens == reference(list(b"<|user|>\nyo\n<|assistant|>\n"), 4)
        prompts = [[i + 1, i + 2] for i in range(30)]
        outs = c.generate_batch(prompts, max_tokens=5)
        assert [o.tokens for o in outs] == [reference(p, 5) for p in prompts]
        mixed = c.generate_batch([[1], [300]], max_tokens=2, return_exceptions=True)
        assert isinstance(mixed[1], InvalidRequestError) and "outside the vocabulary" in str(
            mixed[1]
        )
        info = c.cluster_info()
        assert [w.worker_id for w in info.workers] == ["w0", "w1"]
        assert all(w.connected and w.max_batch_size == 8 for w in info.workers)
        assert info.vocab_size == 256 and info.max_queue == 4096
        # Idempotent retry: same id, same result, no second run.
        a = c.generate([9, 9, 9], max_tokens=4, request_id="fixed-id")
        b = c.generate([9, 9, 9], max_tokens=4, request_id="fixed-id")
        assert a.tokens == b.tokens and a.request_id == b.request_id == "fixed-id"


def test_client_side_errors_and_raw_status(running: Running) -> None:
    with Client(running.gw.address) as c:
        with pytest.raises(InvalidRequestError, match="top_p"):
            c.generate([1], top_p=7.0)
        with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
            c.generate([1, 999])
        with pytest.raises(InvalidRequestError, match="prompt_token_ids"):
            from protos.specfleet.v1 import gateway_pb2 as pb

            try:
                c._stub.Submit(pb.GenerateRequest(prompt="x", prompt_token_ids=[1, 2, 3]))
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
                raise InvalidRequestError("INVALID_ARGUMENT", e.details()) from None
        with pytest.raises(SpecfleetError) as err:
            list(c.stream([1, 2], max_tokens=2000, timeout_s=0.01))
        assert err.value.code == "DEADLINE_EXCEEDED"
        # Still serving after the errors.
        assert c.generate([2], max_tokens=3).tokens == reference([2], 3)


def test_queue_full_is_resource_exhausted_and_recovers(tmp_path: Path) -> None:
    r = Running(tmp_path, max_queue=4, n=1)
    try:
        r.call(r.h.links[0].stop())  # no worker: requests wait in the queue
        with Client(r.gw.address) as c:
            streams = [c.stream([1, i + 1], max_tokens=3) for i in range(4)]
            firsts = []
            for s in streams:  # start them (a generator runs on first next in a thread)
                t = threading.Thread(target=lambda s=s: firsts.append(list(s)))
                t.start()
                firsts.append(t)
            for _ in range(200):
                if len(r.h.sched.policy) >= 4:
                    break
                threading.Event().wait(0.01)
            with pytest.raises(QueueFullError, match="queue is full"):
                c.generate([3], max_tokens=2)
            from cluster.worker_rpc import GrpcWorkerLink, LinkConfig

            async def relink() -> None:
                link = GrpcWorkerLink(
                    "w0", r.h._resolver(0), r.h.sched, LinkConfig(reconnect_s=0.05)
                )
                r.h.links[0] = link
                r.h.sched.add_worker(link)
                link.start()

            r.call(relink())
            for t in [f for f in firsts if isinstance(f, threading.Thread)]:
                t.join(30)
            results = [f for f in firsts if isinstance(f, list)]
            assert len(results) == 4
            assert sorted(sum((d.tokens for d in res), []) for res in results) == sorted(
                reference([1, i + 1], 3) for i in range(4)
            )
            assert c.generate([3], max_tokens=2).tokens == reference([3], 2)
    finally:
        r.close()


def test_auth_health_reflection(tmp_path: Path) -> None:
    r = Running(tmp_path, token=TOKEN, n=1)
    try:
        with pytest.raises(SpecfleetError) as e:
            Client(r.gw.address).generate([1], max_tokens=2)
        assert e.value.code == "UNAUTHENTICATED"
        with pytest.raises(SpecfleetError) as e:
            Client(r.gw.address, token="wrong").generate([1], max_tokens=2)
        assert e.value.code == "UNAUTHENTICATED"
        assert Client(r.gw.address, token=TOKEN).generate([1], max_tokens=2).tokens == reference(
            [1], 2
        )
        ch = grpc.insecure_channel(r.gw.address)
        resp = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="specfleet.v1.Gateway")
        )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        md = (("authorization", f"Bearer {TOKEN}"),)
        reqs = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        names = [
            s.name
            for r_ in stub.ServerReflectionInfo(reqs, metadata=md)
            for s in r_.list_services_response.service
        ]
        assert "specfleet.v1.Gateway" in names
        ch.close()
    finally:
        r.close()


def test_cancel_and_disconnect_free_the_request(running: Running) -> None:
    sched = running.h.sched
    # Rounds of 20 ms: 1,500 tokens then take ~15 s, so neither request can finish before its
    # cancel lands (at 2 ms a round one did, in ~1.5 s, on a loaded CI machine).
    for engine in running.h.engines:
        engine.step_delay_s = 0.02
    with Client(running.gw.address) as c:
        got: list = []
        err: list = []

        def consume() -> None:
            try:
                for d in c.stream([8, 8], max_tokens=1500, request_id="long-1"):
                    got.append(d)
            except SpecfleetError as e:
                err.append(e)

        t = threading.Thread(target=consume)
        t.start()
        for _ in range(500):
            if got:
                break
            threading.Event().wait(0.01)
        assert c.cancel("long-1", "unknown-id") == ["long-1"]
        t.join(10)
        assert err and err[0].code == "CANCELLED"
        # A client that goes away mid-stream: its request is cancelled, the rows freed.
        it = c.stream([7, 7], max_tokens=1500, request_id="long-2")
        next(it)
        it.close()  # cancels the call
        for _ in range(500):
            if "long-2" not in sched.live:
                break
            threading.Event().wait(0.01)
        assert "long-2" not in sched.live
        assert sched.finished["long-2"].final.error_code == "CANCELLED"
        assert all(not s.inflight for s in sched.workers.values())


def test_client_resumes_stream_across_gateway_restart(running: Running) -> None:
    """The gateway goes away mid-stream (as when Ray restarts the scheduler) and comes back on
    the same port: the client retries with the same id and skips what it already delivered."""
    # Rounds of 20 ms: the 300 tokens then take ~6 s, so the request cannot finish before the
    # gateway stops (at 2 ms a round it did, in ~0.6 s, on a loaded CI machine: served from
    # the finished record, not re-run).
    for engine in running.h.engines:
        engine.step_delay_s = 0.02
    port = running.gw.port
    added_before = sum(e.num_added for e in running.h.engines)
    with Client(running.gw.address, retry_timeout_s=30) as c:
        it = c.stream([3, 1, 4], max_tokens=300, request_id="resume-me")
        first = [next(it) for _ in range(3)]
        running.call(running.gw.stop(0))

        async def restart() -> GatewayServer:
            return await GatewayServer(running.h.sched, GatewayConfig(port=port)).start()

        threading.Timer(0.5, lambda: setattr(running, "gw", running.call(restart()))).start()
        rest = list(it)
    tokens = sum((d.tokens for d in first + rest), [])
    assert tokens == reference([3, 1, 4], 300), "each token exactly once across the restart"
    assert rest[-1].finished and rest[-1].finish_reason == "length"
    assert sum(e.num_added for e in running.h.engines) == added_before + 2, "it really re-ran"


def test_fuzz_raw_bytes_get_proper_statuses(running: Running) -> None:
    """Random and mutated request bytes on every method: each reply is a proper status or a
    valid response, and a well-formed request afterwards still works."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from protos.specfleet.v1 import gateway_pb2 as pb

    ch = grpc.insecure_channel(running.gw.address)
    methods = ["Submit", "SubmitBatch", "Cancel", "ClusterInfo"]
    calls = {m: ch.unary_unary(f"/specfleet.v1.Gateway/{m}") for m in methods}
    stream = ch.unary_stream("/specfleet.v1.Gateway/Generate")
    valid = pb.GenerateRequest(
        prompt_token_ids=[1], sampling=pb.Sampling(max_tokens=2)
    ).SerializeToString()
    allowed = {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
    seen: set = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        data=st.one_of(
            st.binary(max_size=64),
            st.binary(max_size=8).map(lambda b: valid[: len(valid) // 2] + b),
            st.binary(max_size=4).map(lambda b: b"\x52" + b + valid),  # unknown field 10
        ),
        method=st.sampled_from([*methods, "Generate"]),
    )
    def fuzz(data: bytes, method: str) -> None:
        try:
            if method == "Generate":
                list(stream(data, timeout=5))
            else:
                calls[method](data, timeout=5)
            seen.add("OK")
        except grpc.RpcError as e:
            assert e.code() in allowed, (method, data, e.code(), e.details())
            seen.add(e.code())

    fuzz()
    assert grpc.StatusCode.INVALID_ARGUMENT in seen
    with Client(running.gw.address) as c:
        assert c.generate([1, 2], max_tokens=3).tokens == reference([1, 2], 3)
    ch.close()


def test_logprobs_flow_through_stream_and_result(running: Running) -> None:
    with Client(running.gw.address) as c:
        out = c.generate([6, 1], max_tokens=7, logprobs=True)
        assert out.logprobs == pytest.approx(fake_logprobs(out.tokens))
        deltas = list(c.stream([6, 1], max_tokens=7, logprobs=True))
        assert all(len(d.logprobs or []) == len(d.tokens) for d in deltas)
        assert sum((d.logprobs or [] for d in deltas), []) == pytest.approx(out.logprobs)
        assert c.generate([6, 1], max_tokens=3).logprobs is None
