"""The worker wire format (protos/specfleet/v1/worker.proto, schema v1), both directions, for
both sides: the scheduler's links encode batches and decode events and Info with it, the
worker's server decodes batches and encodes events and Info with it. Schema, limits,
validation, encode and decode live here and nowhere else, so the two sides cannot disagree
(the field checks it reads with are protos/msgpack_fields.py; its strict protobuf parse,
shared with the gateway's codec, protos/strict_pb.py).

Protobuf is the envelope; bodies are msgpack maps tagged with a content type and schema
version; token ids travel as packed little-endian uint32 `bin` values (protos/packing.py).
Reading is strict (unknown keys and protobuf fields are refused, wrong types and non-finite
floats too) and bounded (`CodecLimits`). Every failure raises `WireError` naming the field and
the status the server answers with. Problems confined to one identifiable request come back
as `RequestError`s instead, so one bad request never fails its batch or its session.

Layer: imports the shared contract and the generated stubs only; neither grpc, mlx, nor the
worker or cluster packages (tests/test_layers.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack
from google.protobuf import message as pb_message

from contract.limits import MAX_STOP_SEQUENCES, MAX_WIRE_ID_CHARS
from contract.status import StatusCode, WorkerState
from contract.types import EngineInfo, RequestOutput, SamplingParams
from protos.msgpack_fields import (
    INVALID,
    WireError,
    expect_list,
    expect_map,
    expect_str,
    unpack_body,
    unpack_tokens,
)
from protos.packing import pack_f32, pack_u32, unpack_f32
from protos.specfleet.v1 import worker_pb2 as pb
from protos.strict_pb import StrictPbError, check_known, parse_strict

SCHEMA_VERSION = 1
CT_BATCH = "application/vnd.specfleet.batch+msgpack"
CT_EVENTS = "application/vnd.specfleet.events+msgpack"
CT_INFO = "application/vnd.specfleet.info+msgpack"
BATCH_KEYS = frozenset({"submit", "abort"})
SUBMIT_KEYS = frozenset({"id", "prompt", "params"})
EVENT_KEYS = frozenset(
    {"id", "type", "tokens", "logprobs", "finish_reason", "error", "stats", "code", "field",
     "message"}
)  # fmt: skip
FINISH_REASONS = frozenset({"stop", "length", "abort", "error"})
STATS_KEYS = (
    "num_prompt_tokens",
    "num_generated_tokens",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_cached_tokens",  # prompt tokens from the prefix cache; at most num_prompt_tokens
)
PARAM_FIELDS = {f.name: f for f in dataclasses.fields(SamplingParams)}
_BOOLS = tuple(n for n, f in PARAM_FIELDS.items() if f.type == "bool")
_FLOATS = tuple(n for n, f in PARAM_FIELDS.items() if f.type == "float")
_INFO_FIELDS = {f.name for f in dataclasses.fields(EngineInfo)}


@dataclass(frozen=True)
class CodecLimits:
    """Bounds on everything arriving from outside; the worker server passes its config here."""

    max_body_bytes: int = 64 * 1024 * 1024  # msgpack Unpacker max_buffer_size
    max_requests_per_batch: int = 4096
    max_aborts_per_batch: int = 65536
    max_events_per_message: int = 1 << 20
    max_request_id_len: int = MAX_WIRE_ID_CHARS  # every id the gateway admits, as a wire id
    max_stop_sequences: int = MAX_STOP_SEQUENCES

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"CodecLimits.{f.name}={value!r} is invalid: pass an int > 0")


@dataclass(frozen=True)
class SubmitRequest:
    request_id: str  # from the scheduler: the wire id "<request id>~<attempt>.<dispatch>"
    prompt: list[int]  # [num_prompt_tokens] committed prefix: prompt + tokens already emitted
    params: SamplingParams


@dataclass(frozen=True)
class RequestError:
    """A request refused before or while entering the engine; the stream stays open."""

    request_id: str
    code: StatusCode
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
    state: WorkerState
    engine: EngineInfo


# ---------------------------------------------------------------- envelope


def _payload(content_type: str, body: object) -> pb.Payload:
    return pb.Payload(
        content_type=content_type,
        schema_version=SCHEMA_VERSION,
        body=msgpack.packb(body, use_bin_type=True),
    )


def _strict(msg: pb_message.Message | bytes, cls: Any) -> Any:
    """`msg` as a `cls` message, parsed from bytes or as given, with no unknown field at any
    depth (protos/strict_pb.py); a gRPC stub hands decoded messages, which are checked too."""
    try:
        if isinstance(msg, bytes):
            return parse_strict(cls, msg)
        check_known(msg, cls.__name__)
        return msg
    except StrictPbError as e:
        raise WireError(INVALID, e.where, f"{e.detail} (schema v{SCHEMA_VERSION})") from None


def _body(msg: Any, content_type: str, limits: CodecLimits) -> Any:
    """The msgpack body of an envelope message, checked against content type and version."""
    name = type(msg).__name__
    if not msg.HasField("payload"):
        raise WireError(INVALID, f"{name}.payload", "missing")
    payload = msg.payload  # its fields were checked with its message's (_strict)
    if payload.schema_version != SCHEMA_VERSION:
        raise WireError(
            INVALID,
            f"{name}.payload.schema_version",
            f"{payload.schema_version} is not supported; this side speaks v{SCHEMA_VERSION}: "
            "run matching specfleet versions",
        )
    if payload.content_type != content_type:
        raise WireError(
            INVALID,
            f"{name}.payload.content_type",
            f"{payload.content_type!r}; expected {content_type!r}",
        )
    return unpack_body(payload.body, f"{name}.payload.body", limits.max_body_bytes)


# ---------------------------------------------------------------- SamplingParams map


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    """The `params` map: only non-default fields (the reader's SamplingParams fills the rest);
    token-id stops travel packed."""
    out: dict[str, Any] = {}
    for name, f in PARAM_FIELDS.items():
        value = getattr(params, name)
        if value == f.default or (
            f.default_factory is not dataclasses.MISSING and value == f.default_factory()
        ):
            continue
        if name == "stop":
            value = [s if isinstance(s, str) else pack_u32(s) for s in value]
        elif name == "stop_token_ids":
            value = pack_u32(value)
        out[name] = value
    return out


def params_from_wire(obj: object, name: str, max_stop_sequences: int) -> SamplingParams:
    """SamplingParams from a `params` map; raises WireError naming the field on any bad value."""
    kw = dict(expect_map(obj, name, PARAM_FIELDS))
    if "stop" in kw:
        stops = expect_list(kw["stop"], f"{name}.stop", max_stop_sequences)
        kw["stop"] = tuple(
            s if isinstance(s, str) else tuple(unpack_tokens(s, f"{name}.stop[{i}]"))
            for i, s in enumerate(stops)
        )
    for key in _BOOLS:
        if key in kw and not isinstance(kw[key], bool):
            raise WireError(INVALID, f"{name}.{key}", f"{kw[key]!r:.40} is not a bool")
    for key in _FLOATS:
        if isinstance(kw.get(key), float) and not math.isfinite(kw[key]):
            raise WireError(INVALID, f"{name}.{key}", f"{kw[key]!r} is not a finite number")
    if "stop_token_ids" in kw:
        kw["stop_token_ids"] = tuple(unpack_tokens(kw["stop_token_ids"], f"{name}.stop_token_ids"))
    try:
        return SamplingParams(**kw)
    except (ValueError, TypeError) as e:
        m = re.match(r"SamplingParams\.(\w+)=", str(e))
        raise WireError(INVALID, f"{name}.{m.group(1)}" if m else name, str(e)) from None


# ---------------------------------------------------------------- session requests


def encode_batch(submit: list[SubmitRequest], abort: list[str] | None = None) -> pb.SessionRequest:
    body: dict[str, Any] = {}
    if submit:
        body["submit"] = [
            {"id": r.request_id, "prompt": pack_u32(r.prompt), "params": params_to_wire(r.params)}
            for r in submit
        ]
    if abort:
        body["abort"] = list(abort)
    return pb.SessionRequest(payload=_payload(CT_BATCH, body))


def decode_batch(data: bytes, limits: CodecLimits) -> SessionBatch:
    """Serialized SessionRequest bytes -> SessionBatch. Envelope problems (and ids that are not
    strings: nothing to answer to) raise WireError; a problem of one request lands in
    SessionBatch.errors."""
    msg = _strict(data, pb.SessionRequest)
    body = expect_map(_body(msg, CT_BATCH, limits), "body", BATCH_KEYS)
    batch = SessionBatch()
    items = expect_list(body.get("submit", []), "submit", limits.max_requests_per_batch)
    for i, item in enumerate(items):
        where = f"submit[{i}]"
        if not isinstance(item, dict):
            raise WireError(INVALID, where, f"expected a map, got {type(item).__name__}")
        request_id = expect_str(item.get("id"), f"{where}.id")
        try:
            if len(request_id) > limits.max_request_id_len:  # refused alone, session goes on
                raise WireError(
                    INVALID,
                    f"{where}.id",
                    f"length {len(request_id)} exceeds "
                    f"max_request_id_len={limits.max_request_id_len}",
                )
            expect_map(item, where, SUBMIT_KEYS)
            if "prompt" not in item:
                raise WireError(INVALID, f"{where}.prompt", "missing; send packed uint32 token ids")
            prompt = unpack_tokens(item["prompt"], f"{where}.prompt")
            params = params_from_wire(
                item.get("params", {}), f"{where}.params", limits.max_stop_sequences
            )
        except WireError as e:
            batch.errors.append(RequestError(request_id, e.code, e.field, e.message))
            continue
        batch.submit.append(SubmitRequest(request_id, prompt, params))
    aborts = expect_list(body.get("abort", []), "abort", limits.max_aborts_per_batch)
    ids = [expect_str(a, f"abort[{i}]") for i, a in enumerate(aborts)]
    # An id over the limit was never admitted, so it cannot be running: nothing to abort.
    batch.abort = [a for a in ids if len(a) <= limits.max_request_id_len]
    return batch


# ---------------------------------------------------------------- session events


def _event(item: RequestOutput | RequestError) -> dict[str, Any]:
    if isinstance(item, RequestError):
        return {
            "id": item.request_id,
            "type": "error",
            "code": str(item.code),
            "field": item.field,
            "message": item.message,
        }
    event: dict[str, Any] = {"id": item.request_id, "type": "finish" if item.finished else "delta"}
    event["tokens"] = pack_u32(item.new_tokens)
    if item.new_logprobs is not None:
        event["logprobs"] = pack_f32(item.new_logprobs)
    if item.finished:
        event["finish_reason"] = item.finish_reason
        if item.error is not None:
            event["error"] = item.error
        event["stats"] = {k: getattr(item, k) for k in STATS_KEYS}
    return event


def encode_events(items: list[RequestOutput | RequestError]) -> pb.SessionEvent:
    return pb.SessionEvent(payload=_payload(CT_EVENTS, {"events": [_event(i) for i in items]}))


def decode_events(
    msg: pb.SessionEvent | bytes, limits: CodecLimits | None = None
) -> list[RequestOutput | RequestError]:
    """SessionEvent (message or bytes) -> RequestOutput (delta/finish) and RequestError items."""
    limits = limits or CodecLimits()
    msg = _strict(msg, pb.SessionEvent)
    body = expect_map(_body(msg, CT_EVENTS, limits), "body", frozenset({"events"}))
    events = expect_list(body.get("events"), "events", limits.max_events_per_message)
    return [_read_event(ev, f"events[{i}]") for i, ev in enumerate(events)]


def _read_event(ev: object, where: str) -> RequestOutput | RequestError:
    ev = expect_map(ev, where, EVENT_KEYS)
    request_id = expect_str(ev.get("id"), f"{where}.id")
    kind = ev.get("type")
    if kind == "error":
        code = ev.get("code")
        if not isinstance(code, str) or code not in StatusCode.__members__:
            raise WireError(INVALID, f"{where}.code", f"{code!r:.40} is not a status code name")
        field_, message = ev.get("field"), ev.get("message")
        if not (isinstance(field_, str) and isinstance(message, str)):
            raise WireError(INVALID, where, "an error event needs string field and message")
        return RequestError(request_id, StatusCode(code), field_, message)
    if kind not in ("delta", "finish"):
        raise WireError(INVALID, f"{where}.type", f"{kind!r:.40} is not delta, finish or error")
    reason = ev.get("finish_reason")
    if reason is not None and not (isinstance(reason, str) and reason in FINISH_REASONS):
        raise WireError(INVALID, f"{where}.finish_reason", f"{reason!r:.40} is not one of "
                        f"{sorted(FINISH_REASONS)}")  # fmt: skip
    error = ev.get("error")
    if error is not None and not isinstance(error, str):
        raise WireError(INVALID, f"{where}.error", "expected a string")
    tokens = unpack_tokens(ev.get("tokens", b""), f"{where}.tokens")
    lp = ev.get("logprobs")
    try:
        logprobs = None if lp is None else unpack_f32(lp)
    except ValueError as e:
        raise WireError(INVALID, f"{where}.logprobs", str(e)) from None
    if logprobs is not None and len(logprobs) != len(tokens):
        raise WireError(INVALID, f"{where}.logprobs", "expected one float32 per token")
    out = RequestOutput(request_id, tokens, kind == "finish", reason, error, logprobs)  # type: ignore[arg-type]  # reason checked above
    stats = expect_map(ev.get("stats", {}), f"{where}.stats", frozenset(STATS_KEYS))
    for k, v in stats.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise WireError(INVALID, f"{where}.stats.{k}", f"{v!r:.40} is not a count")
        setattr(out, k, v)
    if out.num_cached_tokens > out.num_prompt_tokens:
        raise WireError(INVALID, f"{where}.stats.num_cached_tokens", f"{out.num_cached_tokens} "
                        f"exceeds num_prompt_tokens={out.num_prompt_tokens}")  # fmt: skip
    return out


# ---------------------------------------------------------------- info


def decode_info_request(data: bytes) -> pb.InfoRequest:
    return _strict(data, pb.InfoRequest)


def encode_info(info: WorkerInfo) -> pb.InfoResponse:
    body = dataclasses.asdict(info.engine)
    body.update(worker_id=info.worker_id, state=str(info.state))
    return pb.InfoResponse(payload=_payload(CT_INFO, body))


def decode_info(msg: pb.InfoResponse | bytes, limits: CodecLimits | None = None) -> WorkerInfo:
    msg = _strict(msg, pb.InfoResponse)
    body = _body(msg, CT_INFO, limits or CodecLimits())
    if not isinstance(body, dict):
        raise WireError(INVALID, "InfoResponse.payload.body", "expected a map")
    state = body.get("state")
    if not isinstance(state, str) or state not in {s.value for s in WorkerState}:
        raise WireError(INVALID, "InfoResponse.state", f"{state!r:.40} is not a worker state")
    # Lenient on extra keys: a newer worker may report more facts under the same schema.
    try:
        engine = EngineInfo(**{k: v for k, v in body.items() if k in _INFO_FIELDS})
    except TypeError as e:
        raise WireError(INVALID, "InfoResponse.payload.body", f"misses engine facts: {e}") from None
    return WorkerInfo(str(body.get("worker_id", "")), WorkerState(state), engine)
