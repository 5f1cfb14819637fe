"""The worker wire codec both sides use (protos/worker_codec.py): a table of SamplingParams
round trips and of bad `params` maps, then each message type encoded and decoded again."""

from __future__ import annotations

import msgpack
import pytest

from contract.status import StatusCode, WorkerState
from contract.types import EngineInfo, RequestOutput, SamplingParams
from protos.packing import pack_u32
from protos.worker_codec import (
    CT_EVENTS,
    CT_INFO,
    EVENT_KEYS,
    PARAM_FIELDS,
    CodecLimits,
    RequestError,
    SubmitRequest,
    WireError,
    WorkerInfo,
    decode_batch,
    decode_events,
    decode_info,
    encode_batch,
    encode_events,
    encode_info,
    params_from_wire,
    params_to_wire,
)

INVALID_ARGUMENT = StatusCode.INVALID_ARGUMENT
RESOURCE_EXHAUSTED = StatusCode.RESOURCE_EXHAUSTED

ROUND_TRIPS = [
    (SamplingParams(), {}),
    (SamplingParams(max_tokens=7), {"max_tokens": 7}),
    (
        SamplingParams(temperature=0.7, top_p=0.9, top_k=5, min_p=0.1, seed=3),
        {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": 3},
    ),
    (
        SamplingParams(stop=("ab", (4, 5)), stop_token_ids=(9, 2**32 - 1)),
        {"stop": ["ab", pack_u32([4, 5])], "stop_token_ids": pack_u32([9, 2**32 - 1])},
    ),
    (
        SamplingParams(ignore_eos=True, logprobs=True, draft_depth=2, acceptance="coupled"),
        {"ignore_eos": True, "logprobs": True, "draft_depth": 2, "acceptance": "coupled"},
    ),
    (
        SamplingParams(repetition_penalty=1.3, presence_penalty=-0.5, num_resumed_tokens=12),
        {"repetition_penalty": 1.3, "presence_penalty": -0.5, "num_resumed_tokens": 12},
    ),
]


@pytest.mark.parametrize("params,wire", ROUND_TRIPS)
def test_round_trip_sends_only_non_defaults(params: SamplingParams, wire: dict) -> None:
    assert params_to_wire(params) == wire
    # Through real msgpack bytes, as on the wire.
    body = msgpack.unpackb(msgpack.packb(wire, use_bin_type=True), raw=False)
    assert params_from_wire(body, "params", 64) == params


def test_every_field_travels() -> None:
    """A field added to SamplingParams is carried (a non-default value reaches the reader)."""
    changed = SamplingParams(
        max_tokens=3,
        temperature=0.5,
        top_p=0.5,
        top_k=2,
        min_p=0.2,
        seed=1,
        stop=("x",),
        stop_token_ids=(1,),
        ignore_eos=True,
        draft_depth=1,
        acceptance="exact",
        repetition_penalty=1.1,
        presence_penalty=0.4,
        logprobs=True,
        num_resumed_tokens=5,
    )
    base = SamplingParams()
    differ = {f for f in PARAM_FIELDS if getattr(changed, f) != getattr(base, f)}
    assert differ == set(PARAM_FIELDS), f"extend this test: {set(PARAM_FIELDS) - differ}"
    assert set(params_to_wire(changed)) == set(PARAM_FIELDS)
    assert params_from_wire(params_to_wire(changed), "p", 64) == changed


BAD = [
    ([], "p", INVALID_ARGUMENT, "expected a map"),
    ({"nope": 1}, "p.nope", INVALID_ARGUMENT, "unknown key"),
    ({"max_tokens": 0}, "p.max_tokens", INVALID_ARGUMENT, "max_tokens >= 1"),
    ({"max_tokens": "9"}, "p.max_tokens", INVALID_ARGUMENT, "positive int"),
    ({"temperature": float("nan")}, "p.temperature", INVALID_ARGUMENT, "not a finite"),
    ({"presence_penalty": float("inf")}, "p.presence_penalty", INVALID_ARGUMENT, "not a finite"),
    ({"logprobs": 1}, "p.logprobs", INVALID_ARGUMENT, "not a bool"),
    ({"ignore_eos": "yes"}, "p.ignore_eos", INVALID_ARGUMENT, "not a bool"),
    ({"stop": "abc"}, "p.stop", INVALID_ARGUMENT, "expected an array"),
    ({"stop": ["a"] * 3}, "p.stop", RESOURCE_EXHAUSTED, "exceeds the limit 2"),
    ({"stop": [b"\x00" * 5]}, "p.stop[0]", INVALID_ARGUMENT, "length 5"),
    ({"stop_token_ids": [1, 2]}, "p.stop_token_ids", INVALID_ARGUMENT, "got list"),
    ({"acceptance": "maybe"}, "p.acceptance", INVALID_ARGUMENT, "use one of"),
    ({"seed": -1}, "p.seed", INVALID_ARGUMENT, "2**63"),
    ({"num_resumed_tokens": -2}, "p.num_resumed_tokens", INVALID_ARGUMENT, "int >= 0"),
]


@pytest.mark.parametrize("wire,field,code,needle", BAD)
def test_bad_params_name_the_field(wire: object, field: str, code: str, needle: str) -> None:
    with pytest.raises(WireError) as e:
        params_from_wire(wire, "p", max_stop_sequences=2)
    assert (e.value.field, e.value.code) == (field, code)
    assert needle in e.value.message


def test_batches_round_trip() -> None:
    params = [p for p, _ in ROUND_TRIPS]
    submits = [SubmitRequest(f"r{i}~1", [i + 1, 2, 3], p) for i, p in enumerate(params)]
    raw = encode_batch(submits, ["gone~1"]).SerializeToString()
    batch = decode_batch(raw, CodecLimits())
    assert not batch.errors and batch.abort == ["gone~1"]
    assert batch.submit == submits
    one = encode_batch([SubmitRequest("x", [1], SamplingParams(top_k=3))]).payload.body
    assert msgpack.unpackb(one) == {
        "submit": [{"id": "x", "prompt": pack_u32([1]), "params": {"top_k": 3}}]
    }


def test_events_and_info_round_trip() -> None:
    delta = RequestOutput("a", [1, 2], new_logprobs=[-0.5, -1.0])
    finish = RequestOutput(
        "b", [3], True, "length", num_prompt_tokens=40, num_generated_tokens=1, num_cached_tokens=32
    )
    err = RequestError("c", StatusCode.INVALID_ARGUMENT, "submit[0].prompt", "empty")
    data = encode_events([delta, finish, err]).SerializeToString()
    assert decode_events(data) == [delta, finish, err]
    engine = EngineInfo("m", 256, 512, "ngram", 4, 8, 0, 0, 8, 4096, 0, [2], 1024, 64, "on")
    info = encode_info(WorkerInfo("w", WorkerState.SERVING, engine))
    assert decode_info(info.SerializeToString()) == WorkerInfo("w", WorkerState.SERVING, engine)


def test_cached_tokens_beyond_the_prompt_are_refused() -> None:
    bad = RequestOutput("b", [3], True, "length", num_prompt_tokens=4, num_cached_tokens=8)
    with pytest.raises(WireError, match=r"events\[0\]\.stats\.num_cached_tokens.*8 exceeds"):
        decode_events(encode_events([bad]).SerializeToString())


def test_unknown_fields_are_refused_in_bytes_and_in_decoded_messages() -> None:
    """A newer peer's field (number 9 here) is refused wherever it sits, whether the message
    arrives as bytes or as the object a gRPC stub already decoded (the links pass those)."""
    from protos.specfleet.v1 import worker_pb2

    engine = EngineInfo("m", 256, 512, "ngram", 4, 8, 0, 0, 8, 4096, 0, [2], 1024, 64, "on")
    info = encode_info(WorkerInfo("w", WorkerState.SERVING, engine)).SerializeToString()
    events = encode_events([RequestOutput("a", [1])]).SerializeToString()
    unknown = b"\x48\x01"  # field 9, varint 1
    for decode, cls, data in ((decode_info, worker_pb2.InfoResponse, info),
                              (decode_events, worker_pb2.SessionEvent, events)):  # fmt: skip
        top = data + unknown  # an unknown field of the envelope
        inner = cls.FromString(data)
        inner.payload.MergeFromString(unknown)  # an unknown field of the payload
        for bad, where in ((top, cls.__name__), (inner, f"{cls.__name__}.payload")):
            for form in (bad if isinstance(bad, bytes) else bad.SerializeToString(),
                         cls.FromString(bad) if isinstance(bad, bytes) else bad):  # fmt: skip
                with pytest.raises(WireError, match="unknown protobuf field") as e:
                    decode(form)
                assert e.value.field == where


# -- the scheduler's side: whatever a worker sends, decoding raises WireError or succeeds --------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from protos.specfleet.v1 import worker_pb2 as pb  # noqa: E402

_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=8),
    st.binary(max_size=12), st.sampled_from(["delta", "finish", "error", "stop", "INTERNAL"]),
)  # fmt: skip
_any = st.recursive(
    _leaf, lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=8), k, max_size=4),
    max_leaves=10,
)  # fmt: skip
_event = st.dictionaries(st.sampled_from(sorted(EVENT_KEYS) + ["x"]), _any, max_size=6)
_bodies = st.one_of(_any, st.fixed_dictionaries({"events": st.lists(_event, max_size=3)}))


@settings(
    max_examples=2000,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(
    body=_bodies,
    content_type=st.sampled_from([CT_EVENTS, CT_INFO, "x"]),
    raw=st.binary(max_size=40),
)
def test_decoding_what_a_worker_sends_raises_only_wire_errors(body, content_type, raw) -> None:  # type: ignore[no-untyped-def]
    payload = pb.Payload(content_type=content_type, schema_version=1, body=msgpack.packb(body))
    for decode, msg in (
        (decode_events, pb.SessionEvent(payload=payload).SerializeToString()),
        (decode_events, raw),
        (decode_info, pb.InfoResponse(payload=payload).SerializeToString()),
    ):
        try:
            decode(msg)
        except WireError as e:
            assert e.field and e.message and e.code in StatusCode
