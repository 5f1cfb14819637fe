"""Defect 1 of issue 13: the gateway and the worker agree on limits (one contract), a request the
worker refuses fails alone with INVALID_ARGUMENT, and a per-request error never ends a session.

Before the fix, a 256-character request id (accepted by the gateway) became a longer wire id
"<id>~<attempt>.<dispatch>" that the worker refused by ending the whole session; the scheduler
requeued everything in flight there, 32 times."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import msgpack
import pytest
from google.protobuf import json_format

from cluster import Client
from cluster.client import InvalidRequestError
from protos import worker_codec as codec
from protos.packing import pack_u32
from protos.specfleet.v1 import worker_pb2 as pb
from tests.cluster.fake_engine import reference
from tests.cluster.test_gateway import Running
from tests.workers.service.fake_engine import FakeEngine
from workers.service.grpc_client import WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig

pytestmark = pytest.mark.timeout(120)


def test_longest_gateway_id_is_served_without_a_session_reset(tmp_path: Path) -> None:
    r = Running(tmp_path, n=1)
    try:
        with Client(r.gw.address, retry_timeout_s=5) as c:
            bystander: dict = {}
            t = threading.Thread(
                target=lambda: bystander.update(out=c.generate([3, 4], max_tokens=60))
            )
            t.start()
            long_id = "x" * 256  # the longest id the gateway accepts
            out = c.generate([5, 6], max_tokens=4, request_id=long_id)
            assert out.request_id == long_id and out.tokens == reference([5, 6], 4)
            assert out.usage.requeues == 0
            t.join(60)
            assert bystander["out"].tokens == reference([3, 4], 60)
            assert bystander["out"].usage.requeues == 0
            with pytest.raises(InvalidRequestError, match="request_id"):
                c.generate([5], max_tokens=2, request_id="y" * 257)
            (worker,) = c.cluster_info().workers
            assert worker.connections == 1  # the session was never torn down
    finally:
        r.close()


def raw_batch(body: object) -> bytes:
    payload = pb.Payload(content_type=codec.CT_BATCH, schema_version=1, body=msgpack.packb(body))
    return pb.SessionRequest(payload=payload).SerializeToString()


def test_worker_refuses_one_request_and_keeps_the_session() -> None:
    server = WorkerServer(
        lambda: FakeEngine(max_batch_size=4),
        WorkerServerConfig(metrics_port=None, limits=codec.CodecLimits(max_request_id_len=8)),
    ).start(wait_ready=True, timeout=30)
    client = WorkerClient(server.address)
    try:
        session = client.channel.stream_stream("/specfleet.v1.Worker/Session")
        body = {
            "submit": [
                {"id": "z" * 9, "prompt": pack_u32([1]), "params": {"max_tokens": 2}},
                {"id": "ok", "prompt": pack_u32([3]), "params": {"max_tokens": 2}},
            ],
            "abort": ["q" * 9],  # an over-long abort id cannot be running: nothing to do
        }
        call = session(iter([raw_batch(body)]), timeout=20)
        events = [e for data in call for e in codec.decode_events(pb.SessionEvent.FromString(data))]
        assert call.code() == grpc.StatusCode.OK, call.details()
        (err,) = [e for e in events if isinstance(e, codec.RequestError)]
        assert err.request_id == "z" * 9 and err.code == "INVALID_ARGUMENT"
        assert err.field == "submit[0].id" and "max_request_id_len=8" in err.message
        ok = [t for e in events if not isinstance(e, codec.RequestError) for t in e.new_tokens]
        assert ok == [4, 5]
    finally:
        client.close()
        server.stop(grace=0.5)


# -- defect 8: bad input the gateway and worker accepted ---------------------------------------


def test_gateway_refuses_nested_unknown_fields_and_nan_timeout(tmp_path: Path) -> None:
    from protos.specfleet.v1 import gateway_pb2 as gpb

    r = Running(tmp_path, n=1)
    try:
        with Client(r.gw.address, retry_timeout_s=1) as c:
            submit = c._channel.unary_unary("/specfleet.v1.Gateway/Submit")
            ok = gpb.GenerateRequest(prompt_token_ids=[1])
            ok.sampling.max_tokens = 2
            sampling = ok.sampling.SerializeToString() + b"\xf8\x06\x01"  # field 111 = 1
            nested = ok.SerializeToString() + b"\x2a" + bytes([len(sampling)]) + sampling
            with pytest.raises(grpc.RpcError) as err:
                submit(nested, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "sampling" in err.value.details() and "111" in err.value.details()
            for bad in (float("nan"), float("inf")):
                with pytest.raises(grpc.RpcError) as err:
                    submit(gpb.GenerateRequest(prompt="x", timeout_s=bad).SerializeToString())
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "timeout_s" in err.value.details()
            # Still serving; token ids read as numbers in any tool (grpcurl prints this JSON).
            result = gpb.GenerateResult.FromString(submit(ok.SerializeToString(), timeout=10))
            as_json = json_format.MessageToDict(result)
            assert as_json["tokenIds"] == reference([1], 2)
    finally:
        r.close()


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "presence_penalty"])
def test_worker_refuses_a_bool_for_a_float(name: str) -> None:
    from protos.worker_codec import WireError, params_from_wire

    with pytest.raises(WireError) as err:
        params_from_wire({name: True}, "params", 64)
    assert err.value.field == f"params.{name}" and "bool" in err.value.message


# -- reflection: grpc.reflection.v1 beside v1alpha ------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_v1_and_v1alpha(tmp_path: Path, version: str) -> None:
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2 as rpb

    r = Running(tmp_path, n=1)
    try:
        ch = grpc.insecure_channel(r.gw.address)
        info = ch.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=rpb.ServerReflectionRequest.SerializeToString,
            response_deserializer=rpb.ServerReflectionResponse.FromString,
        )
        asks = [
            rpb.ServerReflectionRequest(list_services=""),
            rpb.ServerReflectionRequest(file_containing_symbol="specfleet.v1.Gateway"),
        ]
        listed, described = list(info(iter(asks), timeout=10))
        names = {s.name for s in listed.list_services_response.service}
        assert {"specfleet.v1.Gateway", "grpc.reflection.v1.ServerReflection"} <= names
        files = described.file_descriptor_response.file_descriptor_proto
        protos = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
        assert any(m.name == "GenerateEvent" for p in protos for m in p.message_type)
        ch.close()
    finally:
        r.close()


def test_every_wire_id_of_an_admitted_id_fits_the_worker_limit() -> None:
    from cluster.scheduler import MAX_ATTEMPTS
    from contract.limits import MAX_REQUEST_ID_CHARS, MAX_WIRE_ID_CHARS

    # The scheduler's wire id "<id>~<attempt>.<dispatch>" at its longest (a 64-bit dispatch count).
    longest = f"{'x' * MAX_REQUEST_ID_CHARS}~{MAX_ATTEMPTS}.{2**64 - 1}"
    assert len(longest) <= MAX_WIRE_ID_CHARS == codec.CodecLimits().max_request_id_len
