"""Cluster side of the worker wire format (protos/specfleet/v1/worker.proto): encode session
batches, decode session events and Info. One codec per side; this one is the scheduler's.

Protobuf envelope, msgpack body tagged with content type and schema version, token ids as
packed little-endian uint32 bytes. Decoding is bounded (msgpack max_buffer_size) and raises
`WorkerWireError` on anything it cannot read: the link then treats the stream as broken.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import msgpack

from protos.packing import unpack_f32, unpack_u32
from protos.specfleet.v1 import worker_pb2 as pb
from protos.worker_schema import (
    CT_BATCH,
    CT_EVENTS,
    CT_INFO,
    SCHEMA_VERSION,
    STATS_KEYS,
    submit_to_wire,
)
from workers.types import EngineInfo, RequestOutput, SamplingParams

MAX_BODY_BYTES = 64 * 1024 * 1024
_INFO_FIELDS = {f.name for f in dataclasses.fields(EngineInfo)}


class WorkerWireError(Exception):
    """A worker message the scheduler cannot read."""


@dataclass(frozen=True)
class WorkerSubmit:
    request_id: str  # the wire id: "<request id>~<attempt>"
    prompt: list[int]  # [num_prompt_tokens] committed prefix: prompt + tokens already emitted
    params: SamplingParams


@dataclass(frozen=True)
class WorkerRejection:
    """A per-request error event: the worker refused this request; the stream stays open."""

    request_id: str
    code: str
    field: str
    message: str


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    state: str  # "loading" | "serving" | "draining"
    engine: EngineInfo


def unpack_tokens(data: object, where: str) -> list[int]:
    try:
        return unpack_u32(data)
    except ValueError as e:
        raise WorkerWireError(f"{where}: {e}") from None


def unpack_logprobs(data: object, where: str) -> list[float]:
    try:
        return unpack_f32(data)
    except ValueError as e:
        raise WorkerWireError(f"{where}: {e}") from None


def encode_session_request(
    submit: list[WorkerSubmit], abort: list[str] | None = None
) -> pb.SessionRequest:
    body: dict[str, Any] = {}
    if submit:
        body["submit"] = [submit_to_wire(r.request_id, r.prompt, r.params) for r in submit]
    if abort:
        body["abort"] = list(abort)
    payload = pb.Payload(
        content_type=CT_BATCH,
        schema_version=SCHEMA_VERSION,
        body=msgpack.packb(body, use_bin_type=True),
    )
    return pb.SessionRequest(payload=payload)


def _body(payload: pb.Payload, content_type: str) -> Any:
    if payload.schema_version != SCHEMA_VERSION or payload.content_type != content_type:
        raise WorkerWireError(
            f"worker sent {payload.content_type!r} v{payload.schema_version}; this scheduler "
            f"reads {content_type!r} v{SCHEMA_VERSION}: run matching specfleet versions"
        )
    if len(payload.body) > MAX_BODY_BYTES:
        raise WorkerWireError(f"worker body of {len(payload.body)} bytes is over {MAX_BODY_BYTES}")
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=True, max_buffer_size=MAX_BODY_BYTES, use_list=True
    )
    try:
        unpacker.feed(payload.body)
        return unpacker.unpack()
    except Exception as e:
        raise WorkerWireError(f"malformed msgpack from worker: {type(e).__name__}: {e}") from None


def decode_session_event(msg: pb.SessionEvent) -> list[RequestOutput | WorkerRejection]:
    body = _body(msg.payload, CT_EVENTS)
    events = body.get("events") if isinstance(body, dict) else None
    if not isinstance(events, list):
        raise WorkerWireError("session event body has no 'events' array")
    out: list[RequestOutput | WorkerRejection] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("id"), str):
            raise WorkerWireError(f"events[{i}] is not a map with a string id")
        kind = ev.get("type")
        if kind == "error":
            out.append(
                WorkerRejection(
                    ev["id"],
                    str(ev.get("code", "")),
                    str(ev.get("field", "")),
                    str(ev.get("message", "")),
                )
            )
            continue
        if kind not in ("delta", "finish"):
            raise WorkerWireError(f"events[{i}].type={kind!r} is unknown")
        lp = ev.get("logprobs")
        if lp is not None and (not isinstance(lp, bytes) or len(lp) % 4):
            raise WorkerWireError(f"events[{i}].logprobs: expected packed float32 bytes")
        ro = RequestOutput(
            request_id=ev["id"],
            new_tokens=unpack_tokens(ev.get("tokens", b""), f"events[{i}].tokens"),
            finished=kind == "finish",
            finish_reason=ev.get("finish_reason"),
            error=ev.get("error"),
            new_logprobs=None if lp is None else unpack_logprobs(lp, f"events[{i}].logprobs"),
        )
        stats = ev.get("stats") or {}
        for k in STATS_KEYS:
            if isinstance(stats.get(k), int):
                setattr(ro, k, stats[k])
        out.append(ro)
    return out


def decode_info(msg: pb.InfoResponse) -> WorkerStatus:
    body = _body(msg.payload, CT_INFO)
    if not isinstance(body, dict):
        raise WorkerWireError("info body is not a map")
    try:
        engine = EngineInfo(**{k: v for k, v in body.items() if k in _INFO_FIELDS})
    except TypeError as e:
        raise WorkerWireError(f"info body misses engine facts: {e}") from None
    return WorkerStatus(str(body.get("worker_id", "")), str(body.get("state", "")), engine)
