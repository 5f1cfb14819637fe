"""Bad input on the wire: exact statuses for known cases, then a bounded hypothesis fuzz of
thousands of malformed messages; the worker keeps serving a session that runs throughout."""

from __future__ import annotations

import threading

import grpc
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos import worker_codec as codec
from protos.packing import pack_u32
from protos.specfleet.v1 import worker_pb2 as pb
from tests.workers.service.fake_engine import FakeEngine, expected_tokens
from workers.service.grpc_client import WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import SamplingParams

MAX_RECEIVE = 256 * 1024
MAX_BODY = 64 * 1024
OK_FAILURES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}


@pytest.fixture(scope="module")
def served():
    cfg = WorkerServerConfig(
        metrics_port=None,
        max_receive_message_bytes=MAX_RECEIVE,
        limits=codec.CodecLimits(max_body_bytes=MAX_BODY),
    )
    server = WorkerServer(lambda: FakeEngine(max_batch_size=8, step_delay_s=0.002), cfg).start(
        wait_ready=True, timeout=30
    )
    client = WorkerClient(server.address)
    raw_session = client.channel.stream_stream("/specfleet.v1.Worker/Session")
    raw_info = client.channel.unary_unary("/specfleet.v1.Worker/Info")
    yield server, client, raw_session, raw_info
    client.close()
    server.stop(grace=0.5)


def send_raw(raw_session, messages: list[bytes]) -> tuple[grpc.StatusCode, str, list]:
    """One stream: send messages, half-close, read all; returns (status, details, events)."""
    call = raw_session(iter(messages), timeout=20)
    events: list = []
    try:
        for data in call:
            events += codec.decode_events(pb.SessionEvent.FromString(data))
    except grpc.RpcError:
        pass
    return call.code(), call.details() or "", events


def batch_bytes(body: object, content_type: str = codec.CT_BATCH, version: int = 1) -> bytes:
    payload = pb.Payload(
        content_type=content_type, schema_version=version, body=msgpack.packb(body)
    )
    return pb.SessionRequest(payload=payload).SerializeToString()


def good(rid: str, prompt: list[int], **params) -> dict:
    return {"id": rid, "prompt": pack_u32(prompt), "params": params}


@pytest.mark.parametrize(
    ("data", "code", "field"),
    [
        (b"\xff\xff\xff", "INVALID_ARGUMENT", "SessionRequest"),
        (batch_bytes({}, version=2), "INVALID_ARGUMENT", "schema_version"),
        (batch_bytes({}, content_type="application/json"), "INVALID_ARGUMENT", "content_type"),
        (batch_bytes({}) + b"\xa0\x06\x01", "INVALID_ARGUMENT", "unknown protobuf field"),
        (
            pb.SessionRequest(
                payload=pb.Payload(content_type=codec.CT_BATCH, schema_version=1, body=b"\xc1")
            ).SerializeToString(),
            "INVALID_ARGUMENT",
            "malformed msgpack",
        ),  # fmt: skip
        (batch_bytes({"submit": [], "bogus": 1}), "INVALID_ARGUMENT", "body.bogus"),
        (batch_bytes({1: 2}), "INVALID_ARGUMENT", "malformed msgpack"),  # strict_map_key
        (batch_bytes({"submit": [{"id": 5}]}), "INVALID_ARGUMENT", "submit[0].id"),
        (batch_bytes({"abort": "x"}), "INVALID_ARGUMENT", "abort"),
        (
            batch_bytes({"submit": [{"id": "a", "prompt": b"x" * (MAX_BODY + 8)}]}),
            "RESOURCE_EXHAUSTED",
            "max_body_bytes",
        ),
        (
            batch_bytes({"abort": ["y" * 1000] * (MAX_RECEIVE // 900)}),
            "RESOURCE_EXHAUSTED",
            "",
        ),  # over gRPC limit
    ],
)
def test_stream_level_errors(served, data: bytes, code: str, field: str) -> None:
    _, _, raw_session, _ = served
    status, details, events = send_raw(raw_session, [data])
    assert status.name == code, details
    assert field in details
    assert events == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (good("a", [1], max_tokens=0), "params.max_tokens"),
        (good("a", [1], temperature=-1.0), "params.temperature"),
        (good("a", [1], top_p="high"), "params.top_p"),
        (good("a", [1], draft_depth=17), "params.draft_depth"),
        (good("a", [1], ignore_eos="yes"), "params.ignore_eos"),
        (good("a", [1], presence_penalty=float("nan")), "params.presence_penalty"),
        (good("a", [1], warp_speed=9), "params.warp_speed"),
        (good("a", [1], stop_token_ids=b"\x01\x02\x03"), "params.stop_token_ids"),
        ({"id": "a", "prompt": b"\x01\x00\x00"}, "prompt"),
        ({"id": "a"}, "prompt"),
        ({"id": "a", "prompt": b"", "extra": 1}, "extra"),
        (good("a", [1, 300]), "prompt"),  # outside the 256-token vocabulary
        (good("a", []), "submit"),  # empty prompt, refused by the engine
        (good("a", [1] * 600), "submit"),  # longer than the context
    ],
)
def test_per_request_errors_name_the_field(served, request_, field) -> None:
    _, _, raw_session, _ = served
    body = {"submit": [request_, good("ok", [3], max_tokens=2)]}
    status, details, events = send_raw(raw_session, [batch_bytes(body)])
    assert status == grpc.StatusCode.OK, details
    errors = [e for e in events if isinstance(e, codec.RequestError)]
    assert len(errors) == 1 and errors[0].request_id == "a" and errors[0].code == "INVALID_ARGUMENT"
    assert field in errors[0].field, errors[0]
    ok_tokens = [t for e in events if not isinstance(e, codec.RequestError) for t in e.new_tokens]
    assert ok_tokens == [4, 5]  # the good request in the same batch is unaffected


def test_bad_info_request(served) -> None:
    _, _, _, raw_info = served
    with pytest.raises(grpc.RpcError) as err:
        raw_info(b"\x08\x01", timeout=5)  # field 1 does not exist in InfoRequest
    assert (
        err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and "InfoRequest" in err.value.details()
    )


# ---------------------------------------------------------------- fuzz

PARAM_KEYS = st.sampled_from(
    sorted(SamplingParams.__dataclass_fields__) + ["", "junk", "max_tokens "]
)
leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.floats(),
    st.text(max_size=20), st.binary(max_size=40),
)  # fmt: skip
anything = st.recursive(
    leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
submit_item = st.fixed_dictionaries(
    {"id": st.one_of(st.text(min_size=1, max_size=12), anything)},
    optional={
        "prompt": st.one_of(st.binary(max_size=64), anything),
        "params": st.one_of(
            st.dictionaries(
                PARAM_KEYS, st.one_of(st.integers(-5, 600), leaf, anything), max_size=5
            ),
            anything,
        ),
    },
)
structured = st.fixed_dictionaries(
    {},
    optional={
        "submit": st.one_of(st.lists(submit_item, max_size=4), anything),
        "abort": st.one_of(st.lists(st.text(max_size=10), max_size=3), anything),
    },
)
messages = st.one_of(
    st.binary(max_size=200),  # arbitrary bytes as protobuf
    st.builds(  # a real envelope around arbitrary bytes, versions and content types
        lambda ct, v, b: pb.SessionRequest(
            payload=pb.Payload(content_type=ct, schema_version=v, body=b)
        ).SerializeToString(),
        st.sampled_from([codec.CT_BATCH, "", "application/json"]),
        st.integers(0, 3),
        st.binary(max_size=200),
    ),
    st.builds(batch_bytes, anything),  # valid msgpack of any shape
    st.builds(batch_bytes, structured),  # plausible batches with wrong types and values
)


def check_reply(
    status: grpc.StatusCode, details: str, events: list, counts: dict | None = None
) -> None:
    if counts is not None:
        counts[status.name] = counts.get(status.name, 0) + 1
        counts["request_errors"] = counts.get("request_errors", 0) + sum(
            isinstance(e, codec.RequestError) for e in events
        )
    if status == grpc.StatusCode.OK:
        for e in events:
            if isinstance(e, codec.RequestError):
                assert (
                    e.code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED") and e.field and e.message
                )
            else:
                assert e.finish_reason in (None, "length", "stop", "abort")
    else:
        assert status in OK_FAILURES, (status, details)
        assert details


def test_fuzz_thousands_of_malformed_messages(served) -> None:
    server, client, raw_session, raw_info = served
    # A well-behaved session streams throughout the fuzz and must be unaffected.
    bystander = client.session(timeout=120)
    bystander.send([codec.SubmitRequest("steady", [1], SamplingParams(max_tokens=500))])
    bystander.close()
    steady: dict = {}
    reader = threading.Thread(target=lambda: steady.update(bystander.collect({"steady"})))
    reader.start()
    counts = {"sent": 0, "good_requests": 0, "good_failures": 0}
    done = threading.Event()

    def good_requests() -> None:  # short good requests on their own sessions, all along
        k = 0
        while not done.is_set():
            prompt = [1 + k % 200]
            res = client.generate({f"good-{k}": prompt}, SamplingParams(max_tokens=8))
            counts["good_requests"] += 1
            if res[f"good-{k}"].tokens != expected_tokens(prompt, 8):
                counts["good_failures"] += 1
            k += 1

    good = threading.Thread(target=good_requests)
    good.start()

    @settings(
        max_examples=2500, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(st.lists(messages, min_size=1, max_size=3))
    def fuzz_session(batch: list[bytes]) -> None:
        counts["sent"] += len(batch)
        check_reply(*send_raw(raw_session, batch), counts)

    @settings(
        max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(st.binary(max_size=100))
    def fuzz_info(data: bytes) -> None:
        counts["sent"] += 1
        try:
            raw_info(data, timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "InfoRequest" in e.details()

    try:
        fuzz_session()
        fuzz_info()
    finally:
        done.set()
        good.join(60)
    print(f"\nworker session fuzz figures: {counts}")
    assert counts["good_requests"] > 0 and counts["good_failures"] == 0
    assert counts["sent"] >= 3000
    reader.join(60)
    assert steady["steady"].tokens == expected_tokens([1], 500)
    res = client.generate({"after": [9, 10]}, SamplingParams(max_tokens=4))
    assert res["after"].tokens == [11, 12, 13, 14]
    assert server.engine_loop.state == "serving"
    assert client.info().engine.num_running == 0


# ---------------------------------------------------------------- fuzz through the real engine

plausible_value = st.one_of(
    st.integers(-1, 6), st.floats(0, 2), st.booleans(), st.none(), st.sampled_from(["coupled", "exact", "x"]),
    st.lists(st.text(max_size=3), max_size=2), st.binary(max_size=12),
)  # fmt: skip
small_params = st.one_of(st.just({}), st.dictionaries(PARAM_KEYS, plausible_value, max_size=4)).map(
    lambda d: {**d, "max_tokens": d["max_tokens"] if isinstance(d.get("max_tokens"), int) else 3}
)
real_item = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=6),
        "prompt": st.one_of(
            st.lists(st.integers(0, 270), max_size=24).map(pack_u32),
            st.binary(max_size=24),
        ),
        "params": small_params,
    }
)


def test_fuzz_real_engine_requests_then_serves() -> None:
    """Random per-request values reach the real engine; each gets a token stream or an
    in-stream error, the engine never dies, and a good request still matches Engine.generate."""
    from tests.workers.service.real_engine import make_engine

    server = WorkerServer(
        lambda: make_engine(max_batch_size=8), WorkerServerConfig(metrics_port=None)
    )
    server.start(wait_ready=True, timeout=60)
    client = WorkerClient(server.address)
    raw_session = client.channel.stream_stream("/specfleet.v1.Worker/Session")
    seen = {"ok": 0, "err": 0}
    try:

        @settings(
            max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(st.lists(real_item, min_size=1, max_size=4, unique_by=lambda r: r["id"]))
        def fuzz(items: list[dict]) -> None:
            status, details, events = send_raw(raw_session, [batch_bytes({"submit": items})])
            assert status == grpc.StatusCode.OK, (status, details)
            check_reply(status, details, events)
            finished = {
                e.request_id for e in events if isinstance(e, codec.RequestError) or e.finished
            }
            assert finished == {r["id"] for r in items}
            seen["err"] += sum(isinstance(e, codec.RequestError) for e in events)
            seen["ok"] += sum(not isinstance(e, codec.RequestError) and e.finished for e in events)

        fuzz()
        assert seen["ok"] > 20 and seen["err"] > 20, seen
        assert server.engine_loop.state == "serving"
        prompt = [11, 22, 33]
        want = make_engine().generate([prompt], SamplingParams(max_tokens=6))[0].tokens
        assert (
            client.generate({"good": prompt}, SamplingParams(max_tokens=6))["good"].tokens == want
        )
    finally:
        client.close()
        server.stop(grace=0.5)
