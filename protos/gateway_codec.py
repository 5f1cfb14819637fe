"""The gateway wire format (protos/specfleet/v1/gateway.proto), both directions: the gateway
server parses requests and encodes events and results with it, the Python client the reverse.
Strict parsing (malformed protobuf and unknown fields at any depth are INVALID_ARGUMENT), the
shared limits, and field-naming errors live here and nowhere else.

Token ids are `repeated uint32` and log-probabilities `repeated float` on this public wire
(grpcurl, Go and Java callers read numbers); the internal worker wire keeps packed bytes.

Layer: imports the shared contract and the generated stubs only; no grpc (tests/test_layers.py).
"""

from __future__ import annotations

from typing import Any

from contract.limits import MAX_STOP_SEQUENCES
from contract.requests import Delta, GenerateInput, SchedulerError, Usage
from contract.status import StatusCode
from contract.types import SamplingParams
from protos.specfleet.v1 import gateway_pb2 as pb
from protos.strict_pb import StrictPbError, parse_strict

INVALID = StatusCode.INVALID_ARGUMENT
SCHEMA = "schema v1"


# -- strict parsing -------------------------------------------------------------------------
def parse(cls: Any, raw: bytes) -> Any:
    """A request message from bytes: malformed protobuf and unknown fields at any depth (a
    misspelt Sampling field) are INVALID_ARGUMENT (protos/strict_pb.py)."""
    try:
        return parse_strict(cls, raw)
    except StrictPbError as e:
        raise SchedulerError(INVALID, f"{e} ({SCHEMA})") from None


_RANGES = {  # protobuf's "Value out of range" names no field: say which, and the range
    "CPPTYPE_UINT32": "0..2**32-1",
    "CPPTYPE_UINT64": "0..2**64-1",
    "CPPTYPE_INT32": "-2**31..2**31-1",
    "CPPTYPE_INT64": "-2**63..2**63-1",
}


def _set(msg: Any, name: str, value: Any, where: str) -> None:
    try:
        setattr(msg, name, value)
    except (ValueError, TypeError) as e:
        field = msg.DESCRIPTOR.fields_by_name[name]
        cpp = {v: k for k, v in vars(type(field)).items() if k.startswith("CPPTYPE_")}
        want = _RANGES.get(cpp.get(field.cpp_type, ""), "a value of the field's type")
        raise SchedulerError(
            INVALID, f"{where}={value!r} does not fit the gateway field: use {want} ({e})"
        ) from None


def _extend(repeated: Any, values: list[Any], where: str) -> None:
    try:
        repeated.extend(values)
    except (ValueError, TypeError) as e:
        raise SchedulerError(INVALID, f"{where}: {e} (token ids are uint32)") from None


# -- sampling -------------------------------------------------------------------------------
_OPTIONAL = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "ignore_eos",
    "draft_depth",
    "repetition_penalty",
    "presence_penalty",
)


def sampling_from_pb(msg: pb.Sampling) -> SamplingParams:
    kw: dict[str, Any] = {k: getattr(msg, k) for k in _OPTIONAL if msg.HasField(k)}
    if len(msg.stop) > MAX_STOP_SEQUENCES:
        raise SchedulerError(
            INVALID, f"sampling.stop: {len(msg.stop)} stops is over {MAX_STOP_SEQUENCES}"
        )
    if msg.stop:
        kw["stop"] = tuple(msg.stop)
    if msg.stop_token_ids:
        kw["stop_token_ids"] = tuple(msg.stop_token_ids)
    if msg.acceptance:
        kw["acceptance"] = msg.acceptance
    if msg.logprobs:
        kw["logprobs"] = True
    try:
        return SamplingParams(**kw)
    except (ValueError, TypeError) as e:
        raise SchedulerError(INVALID, f"sampling: {e}") from None


def sampling_to_pb(params: SamplingParams) -> pb.Sampling:
    default = SamplingParams()
    msg = pb.Sampling(logprobs=params.logprobs)
    for k in _OPTIONAL:
        value = getattr(params, k)
        if value != getattr(default, k) and value is not None:
            _set(msg, k, value, f"sampling.{k}")
    if params.stop:
        if not all(isinstance(s, str) for s in params.stop):
            raise SchedulerError(
                INVALID, "sampling.stop: token-id stops are not served by the gateway: use strings"
            )
        msg.stop.extend(params.stop)  # type: ignore[arg-type]
    _extend(msg.stop_token_ids, list(params.stop_token_ids), "sampling.stop_token_ids")
    if params.acceptance != default.acceptance:
        msg.acceptance = params.acceptance
    return msg


# -- requests -------------------------------------------------------------------------------
def request_from_pb(msg: pb.GenerateRequest) -> GenerateInput:
    which = msg.WhichOneof("input")
    tokens = list(msg.prompt_token_ids)
    prompt: str | list[int] | None = None
    messages: list[dict[str, str]] | None = None
    if which is not None and tokens:
        raise SchedulerError(INVALID, f"set one input: both {which} and prompt_token_ids are set")
    if tokens:
        prompt = tokens
    elif which == "prompt":
        prompt = msg.prompt
    elif which == "chat":
        messages = [{"role": m.role, "content": m.content} for m in msg.chat.messages]
        if not messages:
            raise SchedulerError(INVALID, "chat.messages is empty")
    else:
        raise SchedulerError(INVALID, "no input: set one of prompt, prompt_token_ids or chat")
    if not msg.timeout_s >= 0:  # NaN too
        raise SchedulerError(INVALID, f"timeout_s={msg.timeout_s}: use > 0 or 0 for none")
    params = sampling_from_pb(msg.sampling)
    try:
        return GenerateInput(
            prompt=prompt,
            messages=messages,
            params=params,
            request_id=msg.request_id or None,
            priority=msg.priority,
            timeout_s=msg.timeout_s or None,
        )
    except ValueError as e:  # GenerateInput names the field (request_id, timeout_s, ...)
        raise SchedulerError(INVALID, str(e)) from None


def request_to_pb(inp: GenerateInput) -> pb.GenerateRequest:
    msg = pb.GenerateRequest(request_id=inp.request_id or "", sampling=sampling_to_pb(inp.params))
    _set(msg, "priority", inp.priority, "priority")
    _set(msg, "timeout_s", inp.timeout_s or 0.0, "timeout_s")
    if inp.messages is not None:
        msg.chat.messages.extend(pb.ChatMessage(**m) for m in inp.messages)
    elif isinstance(inp.prompt, str):
        msg.prompt = inp.prompt
    elif inp.prompt is not None:
        _extend(msg.prompt_token_ids, list(inp.prompt), "prompt_token_ids")
    return msg


# -- results --------------------------------------------------------------------------------
def usage_to_pb(u: Usage | None) -> pb.Usage | None:
    if u is None:
        return None
    return pb.Usage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        draft_tokens=u.draft_tokens,
        accepted_tokens=u.accepted_tokens,
        requeues=u.requeues,
        queue_time_s=u.queue_time_s,
        cached_tokens=u.cached_tokens,
    )


def usage_from_pb(u: pb.Usage) -> Usage:
    return Usage(
        u.prompt_tokens,
        u.completion_tokens,
        u.draft_tokens,
        u.accepted_tokens,
        u.requeues,
        u.queue_time_s,
        u.cached_tokens,
    )


def event_to_pb(d: Delta) -> pb.GenerateEvent:
    return pb.GenerateEvent(
        request_id=d.request_id,
        text=d.text,
        token_ids=d.tokens,
        finished=d.finished,
        finish_reason=d.finish_reason or "",
        usage=usage_to_pb(d.usage),
        logprobs=d.logprobs or [],
    )


def event_from_pb(msg: pb.GenerateEvent) -> Delta:
    return Delta(
        request_id=msg.request_id,
        text=msg.text,
        tokens=list(msg.token_ids),
        finished=msg.finished,
        finish_reason=msg.finish_reason or None,
        usage=usage_from_pb(msg.usage) if msg.HasField("usage") else None,
        logprobs=list(msg.logprobs) or None,
    )


def result_to_pb(
    request_id: str, text: str, tokens: list[int], last: Delta, logprobs: list[float] | None
) -> pb.GenerateResult:
    return pb.GenerateResult(
        request_id=request_id,
        text=text,
        token_ids=tokens,
        finish_reason=last.finish_reason or "",
        usage=usage_to_pb(last.usage),
        logprobs=logprobs or [],
    )


def result_tokens(res: pb.GenerateResult) -> tuple[list[int], list[float] | None]:
    """(token ids, log-probabilities or None) of a GenerateResult."""
    return list(res.token_ids), list(res.logprobs) or None
