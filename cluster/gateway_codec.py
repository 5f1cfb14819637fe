"""The one place where gateway protobuf messages become cluster dataclasses and back (both the
gateway server and the Python client use it). No grpc import: pure message conversion."""

from __future__ import annotations

import math
from typing import Any

from cluster.requests import Delta, GenerateInput, SchedulerError, Usage
from contract.limits import MAX_REQUEST_ID_CHARS
from protos.packing import pack_f32, pack_u32, unpack_f32, unpack_u32
from protos.specfleet.v1 import gateway_pb2 as pb
from workers.types import SamplingParams

INVALID_ARGUMENT = "INVALID_ARGUMENT"
MAX_STOPS = 64


def pack_tokens(tokens: list[int]) -> bytes:
    return pack_u32(tokens)


def pack_floats(values: list[float] | None) -> bytes:
    return pack_f32(values) if values else b""


def unpack_floats(data: bytes) -> list[float] | None:
    try:
        return unpack_f32(data) if data else None
    except ValueError as e:
        raise SchedulerError(INVALID_ARGUMENT, f"logprobs: {e}") from None


def unpack_tokens(data: bytes, field: str) -> list[int]:
    try:
        return unpack_u32(data)
    except ValueError as e:
        raise SchedulerError(INVALID_ARGUMENT, f"{field}: {e}") from None


# -- sampling ---------------------------------------------------------------------------------
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
    if len(msg.stop) > MAX_STOPS:
        raise SchedulerError(INVALID_ARGUMENT, f"sampling.stop: {len(msg.stop)} > {MAX_STOPS}")
    if msg.stop:
        kw["stop"] = tuple(msg.stop)
    if msg.stop_token_ids:
        kw["stop_token_ids"] = tuple(unpack_tokens(msg.stop_token_ids, "sampling.stop_token_ids"))
    if msg.acceptance:
        kw["acceptance"] = msg.acceptance
    if msg.logprobs:
        kw["logprobs"] = True
    try:
        return SamplingParams(**kw)
    except (ValueError, TypeError) as e:
        raise SchedulerError(INVALID_ARGUMENT, f"sampling: {e}") from None


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
            INVALID_ARGUMENT, f"{where}={value!r} does not fit the gateway field: use {want} ({e})"
        ) from None


def sampling_to_pb(params: SamplingParams) -> pb.Sampling:
    default = SamplingParams()
    msg = pb.Sampling(logprobs=params.logprobs)
    for k in _OPTIONAL:
        value = getattr(params, k)
        if value != getattr(default, k) and value is not None:
            _set(msg, k, value, f"sampling.{k}")
    if params.stop:
        if not all(isinstance(s, str) for s in params.stop):
            raise ValueError("token-id stop sequences are not served by the gateway: use strings")
        msg.stop.extend(params.stop)  # type: ignore[arg-type]
    if params.stop_token_ids:
        msg.stop_token_ids = pack_tokens(list(params.stop_token_ids))
    if params.acceptance != default.acceptance:
        msg.acceptance = params.acceptance
    return msg


# -- requests ---------------------------------------------------------------------------------
def request_from_pb(msg: pb.GenerateRequest) -> GenerateInput:
    which = msg.WhichOneof("input")
    prompt: str | list[int] | None = None
    messages: list[dict[str, str]] | None = None
    if which == "prompt":
        prompt = msg.prompt
    elif which == "prompt_token_ids":
        prompt = unpack_tokens(msg.prompt_token_ids, "prompt_token_ids")
    elif which == "chat":
        messages = [{"role": m.role, "content": m.content} for m in msg.chat.messages]
        if not messages:
            raise SchedulerError(INVALID_ARGUMENT, "chat.messages is empty")
    else:
        raise SchedulerError(
            INVALID_ARGUMENT, "no input: set one of prompt, prompt_token_ids or chat"
        )
    if not (math.isfinite(msg.timeout_s) and msg.timeout_s >= 0):
        raise SchedulerError(INVALID_ARGUMENT, f"timeout_s={msg.timeout_s}: use > 0 or 0 for none")
    if len(msg.request_id) > MAX_REQUEST_ID_CHARS:
        raise SchedulerError(
            INVALID_ARGUMENT,
            f"request_id: {len(msg.request_id)} characters is over the limit of "
            f"{MAX_REQUEST_ID_CHARS}: use a shorter id",
        )
    return GenerateInput(
        prompt=prompt,
        messages=messages,
        params=sampling_from_pb(msg.sampling),
        request_id=msg.request_id or None,
        priority=msg.priority,
        timeout_s=msg.timeout_s or None,
    )


def request_to_pb(inp: GenerateInput) -> pb.GenerateRequest:
    msg = pb.GenerateRequest(request_id=inp.request_id or "", sampling=sampling_to_pb(inp.params))
    _set(msg, "priority", inp.priority, "priority")
    _set(msg, "timeout_s", inp.timeout_s or 0.0, "timeout_s")
    if inp.messages is not None:
        msg.chat.messages.extend(pb.ChatMessage(**m) for m in inp.messages)
    elif isinstance(inp.prompt, str):
        msg.prompt = inp.prompt
    elif inp.prompt is not None:
        msg.prompt_token_ids = pack_tokens(list(inp.prompt))
    return msg


# -- results ----------------------------------------------------------------------------------
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
    )


def usage_from_pb(u: pb.Usage) -> Usage:
    return Usage(
        u.prompt_tokens,
        u.completion_tokens,
        u.draft_tokens,
        u.accepted_tokens,
        u.requeues,
        u.queue_time_s,
    )


def event_to_pb(d: Delta) -> pb.GenerateEvent:
    return pb.GenerateEvent(
        request_id=d.request_id,
        text=d.text,
        token_ids=pack_tokens(d.tokens),
        finished=d.finished,
        finish_reason=d.finish_reason or "",
        usage=usage_to_pb(d.usage),
        logprobs=pack_floats(d.logprobs),
    )


def event_from_pb(msg: pb.GenerateEvent) -> Delta:
    return Delta(
        request_id=msg.request_id,
        text=msg.text,
        tokens=unpack_tokens(msg.token_ids, "token_ids"),
        finished=msg.finished,
        finish_reason=msg.finish_reason or None,
        usage=usage_from_pb(msg.usage) if msg.HasField("usage") else None,
        logprobs=unpack_floats(msg.logprobs),
    )


def result_to_pb(
    request_id: str, text: str, tokens: list[int], last: Delta, logprobs: list[float] | None
) -> pb.GenerateResult:
    return pb.GenerateResult(
        request_id=request_id,
        text=text,
        token_ids=pack_tokens(tokens),
        finish_reason=last.finish_reason or "",
        usage=usage_to_pb(last.usage),
        logprobs=pack_floats(logprobs),
    )
