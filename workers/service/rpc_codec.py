"""The one place where worker wire messages become dataclasses and back.

Protobuf (protos/specfleet/v1/worker.proto) is the envelope; bodies are msgpack maps with a
content type and schema version; token ids are packed little-endian uint32 `bin` values. The
body schema the scheduler's codec shares (content types, submit items, SamplingParams maps,
`WireError`) is protos/worker_schema.py; this module imports neither mlx nor grpc. Decoding is strict (unknown keys and protobuf fields are refused) and bounded
(`CodecLimits`); failures raise `WireError` naming the field, which the server maps to a gRPC
status. Per-request problems (bad params, bad tokens) are returned as `RequestError`s so that
one bad request never fails its batch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgpack
from google.protobuf import message as pb_message
from google.protobuf import unknown_fields

from protos.packing import pack_f32, pack_u32, unpack_f32
from protos.specfleet.v1 import worker_pb2 as pb
from protos.worker_schema import (
    CT_BATCH,
    CT_EVENTS,
    CT_INFO,
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    SCHEMA_VERSION,
    STATS_KEYS,
    SUBMIT_KEYS,
    WireError,
    expect_list,
    expect_map,
    submit_to_wire,
    unpack_tokens,
)
from contract.limits import MAX_STOP_SEQUENCES, MAX_WIRE_ID_CHARS
from protos.worker_schema import params_from_wire as _params_from_wire
from workers.types import EngineInfo, RequestOutput, SamplingParams

UNAVAILABLE = "UNAVAILABLE"
INTERNAL = "INTERNAL"

_INFO_FIELDS = {f.name for f in dataclasses.fields(EngineInfo)}


@dataclass(frozen=True)
class CodecLimits:
    """Bounds on everything arriving from outside; the server passes its config here."""

    max_body_bytes: int = 64 * 1024 * 1024  # msgpack Unpacker max_buffer_size
    max_requests_per_batch: int = 4096
    max_aborts_per_batch: int = 65536
    max_request_id_len: int = MAX_WIRE_ID_CHARS  # every id the gateway admits, as a wire id
    max_stop_sequences: int = MAX_STOP_SEQUENCES

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"CodecLimits.{f.name}={value!r} is invalid: pass an int > 0")


@dataclass(frozen=True)
class SubmitRequest:
    request_id: str
    prompt: list[int]  # [num_prompt_tokens]
    params: SamplingParams


@dataclass(frozen=True)
class RequestError:
    """A request refused before or while entering the engine; the stream stays open."""

    request_id: str
    code: str
    field: str
    message: str


@dataclass
class SessionBatch:
    submit: list[SubmitRequest] = field(default_factory=list)
    abort: list[str] = field(default_factory=list)
    errors: list[RequestError] = field(default_factory=list)  # per-request decode failures


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: str
    state: str  # "loading" | "serving" | "draining"
    engine: EngineInfo


# ---------------------------------------------------------------- primitives


def pack_tokens(tokens: list[int] | tuple[int, ...]) -> bytes:
    return pack_u32(tokens)


def _payload(content_type: str, body: object) -> pb.Payload:
    return pb.Payload(
        content_type=content_type,
        schema_version=SCHEMA_VERSION,
        body=msgpack.packb(body, use_bin_type=True),
    )


def _check_no_unknown_fields(msg: pb_message.Message, name: str) -> None:
    unknown = unknown_fields.UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({f.field_number for f in unknown})
        raise WireError(
            INVALID_ARGUMENT,
            name,
            f"unknown protobuf field number(s) {numbers} (schema v{SCHEMA_VERSION})",
        )


def _parse_envelope(cls: Any, data: bytes, content_type: str, limits: CodecLimits) -> Any:
    """Parse a protobuf envelope and unpack its msgpack body, strictly and within limits."""
    name = cls.__name__
    try:
        msg = cls.FromString(data)
    except pb_message.DecodeError as e:
        raise WireError(INVALID_ARGUMENT, name, f"malformed protobuf: {e}") from None
    _check_no_unknown_fields(msg, name)
    if not msg.HasField("payload"):
        raise WireError(INVALID_ARGUMENT, f"{name}.payload", "missing")
    payload = msg.payload
    _check_no_unknown_fields(payload, f"{name}.payload")
    if payload.schema_version != SCHEMA_VERSION:
        raise WireError(
            INVALID_ARGUMENT,
            f"{name}.payload.schema_version",
            f"{payload.schema_version} is not supported; this worker speaks v{SCHEMA_VERSION}",
        )
    if payload.content_type != content_type:
        raise WireError(
            INVALID_ARGUMENT,
            f"{name}.payload.content_type",
            f"{payload.content_type!r}; expected {content_type!r}",
        )
    return unpack_body(payload.body, f"{name}.payload.body", limits)


def unpack_body(body: bytes, field_name: str, limits: CodecLimits) -> Any:
    unpacker = msgpack.Unpacker(
        None, raw=False, strict_map_key=True, use_list=True, max_buffer_size=limits.max_body_bytes
    )
    try:
        unpacker.feed(body)
    except msgpack.BufferFull:
        raise WireError(
            RESOURCE_EXHAUSTED,
            field_name,
            f"{len(body)} bytes exceeds max_body_bytes={limits.max_body_bytes}",
        ) from None
    try:
        obj = unpacker.unpack()
    except msgpack.OutOfData:
        raise WireError(INVALID_ARGUMENT, field_name, "truncated or empty msgpack") from None
    except Exception as e:  # msgpack raises several types (ValueError, FormatError, StackError ...)
        raise WireError(
            INVALID_ARGUMENT, field_name, f"malformed msgpack: {type(e).__name__}: {e}"
        ) from None
    if unpacker.tell() != len(body):
        raise WireError(
            INVALID_ARGUMENT,
            field_name,
            f"{len(body) - unpacker.tell()} trailing bytes after the msgpack map",
        )
    return obj


def _expect_id(obj: object, name: str) -> str:
    """A request id the stream can answer to; anything else is a broken sender."""
    if not isinstance(obj, str) or not obj:
        raise WireError(
            INVALID_ARGUMENT, name, f"expected a non-empty string request id, got {obj!r:.80}"
        )
    return obj


def _check_id_length(request_id: str, name: str, limits: CodecLimits) -> None:
    """Too long is a problem of this request only: refused alone, the session goes on."""
    if len(request_id) > limits.max_request_id_len:
        raise WireError(
            INVALID_ARGUMENT,
            name,
            f"length {len(request_id)} exceeds max_request_id_len={limits.max_request_id_len}",
        )


# ---------------------------------------------------------------- session requests


def params_from_wire(obj: object, name: str, limits: CodecLimits) -> SamplingParams:
    """SamplingParams from a wire map; raises WireError naming the field on any bad value."""
    return _params_from_wire(obj, name, limits.max_stop_sequences)


def encode_batch(submit: list[SubmitRequest], abort: list[str] = ()) -> pb.SessionRequest:  # type: ignore[assignment]
    body: dict[str, Any] = {}
    if submit:
        body["submit"] = [submit_to_wire(r.request_id, r.prompt, r.params) for r in submit]
    if abort:
        body["abort"] = list(abort)
    return pb.SessionRequest(payload=_payload(CT_BATCH, body))


def decode_batch(data: bytes, limits: CodecLimits) -> SessionBatch:
    """Decode serialized SessionRequest bytes. Envelope problems raise WireError; problems
    confined to one identifiable request land in SessionBatch.errors."""
    body = expect_map(
        _parse_envelope(pb.SessionRequest, data, CT_BATCH, limits), "body", {"submit", "abort"}
    )
    batch = SessionBatch()
    items = expect_list(body.get("submit", []), "submit", limits.max_requests_per_batch)
    for i, item in enumerate(items):
        where = f"submit[{i}]"
        if not isinstance(item, dict):
            raise WireError(INVALID_ARGUMENT, where, f"expected a map, got {type(item).__name__}")
        request_id = _expect_id(item.get("id"), f"{where}.id")
        try:
            _check_id_length(request_id, f"{where}.id", limits)
            expect_map(item, where, SUBMIT_KEYS)
            if "prompt" not in item:
                raise WireError(
                    INVALID_ARGUMENT, f"{where}.prompt", "missing; send packed uint32 token ids"
                )
            prompt = unpack_tokens(item["prompt"], f"{where}.prompt")
            params = params_from_wire(item.get("params", {}), f"{where}.params", limits)
        except WireError as e:
            batch.errors.append(RequestError(request_id, e.code, e.field, e.message))
            continue
        batch.submit.append(SubmitRequest(request_id, prompt, params))
    aborts = expect_list(body.get("abort", []), "abort", limits.max_aborts_per_batch)
    ids = [_expect_id(a, f"abort[{i}]") for i, a in enumerate(aborts)]
    # An id over the limit was never admitted, so it cannot be running: nothing to abort.
    batch.abort = [a for a in ids if len(a) <= limits.max_request_id_len]
    return batch


# ---------------------------------------------------------------- session events


def _output_to_wire(out: RequestOutput) -> dict[str, Any]:
    event: dict[str, Any] = {"id": out.request_id, "type": "finish" if out.finished else "delta"}
    event["tokens"] = pack_tokens(out.new_tokens)
    if out.new_logprobs is not None:
        event["logprobs"] = pack_f32(out.new_logprobs)
    if out.finished:
        event["finish_reason"] = out.finish_reason
        if out.error is not None:
            event["error"] = out.error
        event["stats"] = {k: getattr(out, k) for k in STATS_KEYS}
    return event


def encode_events(items: list[RequestOutput | RequestError]) -> pb.SessionEvent:
    events = []
    for item in items:
        if isinstance(item, RequestError):
            events.append(
                {
                    "id": item.request_id,
                    "type": "error",
                    "code": item.code,
                    "field": item.field,
                    "message": item.message,
                }
            )
        else:
            events.append(_output_to_wire(item))
    return pb.SessionEvent(payload=_payload(CT_EVENTS, {"events": events}))


def decode_events(
    msg: pb.SessionEvent, limits: CodecLimits | None = None
) -> list[RequestOutput | RequestError]:
    """Client side: SessionEvent -> RequestOutput (delta/finish) and RequestError items."""
    limits = limits or CodecLimits()
    body = _parse_envelope(pb.SessionEvent, msg.SerializeToString(), CT_EVENTS, limits)
    out: list[RequestOutput | RequestError] = []
    for i, ev in enumerate(
        expect_list(expect_map(body, "body", {"events"}).get("events"), "events", 1 << 30)
    ):
        if not isinstance(ev, dict):
            raise WireError(INVALID_ARGUMENT, f"events[{i}]", "expected a map")
        if ev.get("type") == "error":
            out.append(RequestError(ev["id"], ev["code"], ev["field"], ev["message"]))
            continue
        logprobs = ev.get("logprobs")
        ro = RequestOutput(
            request_id=ev["id"],
            new_tokens=unpack_tokens(ev.get("tokens", b""), f"events[{i}].tokens"),
            finished=ev.get("type") == "finish",
            finish_reason=ev.get("finish_reason"),
            error=ev.get("error"),
            new_logprobs=unpack_f32(logprobs) if logprobs else None,
        )
        for k, v in ev.get("stats", {}).items():
            if k in STATS_KEYS:
                setattr(ro, k, v)
        out.append(ro)
    return out


# ---------------------------------------------------------------- info


def decode_info_request(data: bytes) -> pb.InfoRequest:
    try:
        msg = pb.InfoRequest.FromString(data)
    except pb_message.DecodeError as e:
        raise WireError(INVALID_ARGUMENT, "InfoRequest", f"malformed protobuf: {e}") from None
    _check_no_unknown_fields(msg, "InfoRequest")
    return msg


def encode_info(info: WorkerInfo) -> pb.InfoResponse:
    body = dataclasses.asdict(info.engine)
    body.update(worker_id=info.worker_id, state=info.state)
    return pb.InfoResponse(payload=_payload(CT_INFO, body))


def decode_info(msg: pb.InfoResponse, limits: CodecLimits | None = None) -> WorkerInfo:
    body = _parse_envelope(
        pb.InfoResponse, msg.SerializeToString(), CT_INFO, limits or CodecLimits()
    )
    if not isinstance(body, dict):
        raise WireError(INVALID_ARGUMENT, "InfoResponse.payload.body", "expected a map")
    # Lenient on extra keys: a newer worker may report more facts under the same schema.
    engine = EngineInfo(**{k: v for k, v in body.items() if k in _INFO_FIELDS})
    return WorkerInfo(
        worker_id=body.get("worker_id", ""), state=body.get("state", ""), engine=engine
    )
