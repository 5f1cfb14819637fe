"""A bounded fuzz of the gateway (issue 13): thousands of malformed requests on every method,
built field by field (wrong values, unknown nested fields, over-limit sizes, conflicting
inputs) and as raw or mutated bytes, while a well-behaved client streams good requests the
whole time. Every reply is OK or a client-error status (never INTERNAL or UNKNOWN), and every
good request gets exactly the reference tokens."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import Client
from protos.specfleet.v1 import gateway_pb2 as pb
from tests.cluster.fake_engine import reference
from tests.cluster.test_gateway import Running

pytestmark = pytest.mark.timeout(600)
MIN_INPUTS = 2000
CLIENT_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
NEVER = {"INTERNAL", "UNKNOWN"}

u32 = st.one_of(st.integers(0, 9), st.sampled_from([255, 256, 2047, 4096, 2**31, 2**32 - 1]))
f64 = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.5, 1.0, -1.0])
)
text = st.one_of(st.text(max_size=12), st.sampled_from(["", "x" * 1025, "rejection", "coupled"]))
sampling = st.builds(
    lambda kw, stop, ids, acc, unknown: (kw, stop, ids, acc, unknown),
    st.dictionaries(
        st.sampled_from(
            [
                "max_tokens",
                "top_k",
                "draft_depth",
                "seed",
                "temperature",
                "top_p",
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "ignore_eos",
                "logprobs",
            ]
        ),
        st.one_of(u32, f64, st.booleans()),
        max_size=4,
    ),  # fmt: skip
    st.lists(text, max_size=66),
    st.lists(u32, max_size=4),
    text,
    st.booleans(),
)


def build_request(rid: str, which: str, tokens: list[int], prompt: str, chat: list, samp,
                  priority: int, timeout_s: float) -> bytes:  # fmt: skip
    kw, stop, ids, acc, unknown = samp
    s = pb.Sampling()
    for k, v in kw.items():
        try:
            setattr(s, k, v)
        except (TypeError, ValueError):  # not representable in this field: a client cannot send it
            pass
    s.stop.extend(stop)
    s.stop_token_ids.extend(ids)
    s.acceptance = acc
    msg = pb.GenerateRequest(request_id=rid, priority=priority, timeout_s=timeout_s)
    if which in ("prompt", "both"):
        msg.prompt = prompt
    if which in ("tokens", "both"):
        msg.prompt_token_ids.extend(tokens)
    if which == "chat":
        msg.chat.messages.extend(pb.ChatMessage(role=r, content=c) for r, c in chat)
    raw_sampling = s.SerializeToString() + (b"\xf8\x06\x01" if unknown else b"")
    return msg.SerializeToString() + b"\x2a" + _varint(len(raw_sampling)) + raw_sampling


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


structured = st.builds(
    build_request,
    st.one_of(st.text(max_size=8), st.sampled_from(["x" * 256, "y" * 257])),
    st.sampled_from(["prompt", "tokens", "chat", "none", "both"]),
    st.lists(u32, max_size=6),
    text,
    st.lists(st.tuples(text, text), max_size=2),
    sampling,
    st.sampled_from([0, 1, -(2**31), 2**31 - 1]),
    st.one_of(st.sampled_from([0.0, 0.001, 5.0, -1.0, math.inf, math.nan]), st.floats(0, 10)),
)
raw = st.one_of(
    st.binary(max_size=64),
    structured.flatmap(lambda b: st.integers(0, len(b)).map(lambda i: b[:i])),  # truncated
    structured.flatmap(lambda b: st.binary(max_size=4).map(lambda x: b + b"\x52" + x)),
)
method = st.sampled_from(["Submit", "Generate", "SubmitBatch", "Cancel"])


def test_fuzz_gateway_thousands_of_malformed_requests(tmp_path: Path) -> None:
    r = Running(tmp_path, n=2)
    ch = grpc.insecure_channel(r.gw.address)
    calls = {m: ch.unary_unary(f"/specfleet.v1.Gateway/{m}") for m in ("Submit", "Cancel")}
    batch_call = ch.unary_unary("/specfleet.v1.Gateway/SubmitBatch")
    stream = ch.unary_stream("/specfleet.v1.Gateway/Generate")
    figures = {"inputs": 0, "ok": 0, "client_errors": 0, "good_requests": 0, "good_failures": 0}
    statuses: dict[str, int] = {}
    stop = threading.Event()

    def bystander() -> None:  # a well-behaved client, concurrently, the whole time
        with Client(r.gw.address) as c:
            k = 0
            while not stop.is_set():
                prompt = [1 + k % 200, 2 + k % 50]
                out = c.generate(prompt, max_tokens=6)
                figures["good_requests"] += 1
                if out.tokens != reference(prompt, 6) or out.usage.requeues:
                    figures["good_failures"] += 1
                k += 1

    good = threading.Thread(target=bystander)
    good.start()

    def check(code: grpc.StatusCode, details: str) -> None:
        statuses[code.name] = statuses.get(code.name, 0) + 1
        assert code.name not in NEVER, details
        assert code in CLIENT_ERRORS, (code, details)
        figures["client_errors"] += 1

    @settings(max_examples=2200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.one_of(structured, raw), how=method, batch=st.lists(structured, max_size=3))
    def fuzz(data: bytes, how: str, batch: list[bytes]) -> None:
        try:
            if how == "Generate":
                figures["inputs"] += 1
                list(stream(data, timeout=10))
            elif how == "SubmitBatch":
                figures["inputs"] += 1 + len(batch)
                body = b"".join(b"\x0a" + _varint(len(x)) + x for x in [data, *batch])
                resp = pb.SubmitBatchResponse.FromString(batch_call(body, timeout=10))
                for item in resp.items:
                    assert item.error.code not in NEVER, item.error
            else:
                figures["inputs"] += 1
                calls[how](data, timeout=10)
            figures["ok"] += 1
        except grpc.RpcError as e:
            check(e.code(), e.details() or "")

    try:
        fuzz()
        with Client(r.gw.address) as c:
            sessions = [w.connections for w in c.cluster_info().workers]
    finally:
        stop.set()
        good.join(60)
        ch.close()
        r.close()
    print(f"\ngateway fuzz figures: {figures} statuses: {statuses}")
    assert figures["inputs"] >= MIN_INPUTS
    assert figures["good_requests"] > 0 and figures["good_failures"] == 0
    assert figures["client_errors"] > 500 and figures["ok"] > 50
    assert sessions == [1, 1], "no worker session was torn down by a bad request"
